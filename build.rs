// Migrations are embedded with include_str!; rebuild when they change.
fn main() {
    println!("cargo:rerun-if-changed=migrations");
}
