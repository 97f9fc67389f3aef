//! The floor of planning an unchanged publication (the scale issue, items 1 and 3): read
//! and parse the manifest and the destination's state (paths only), then `lstat` every
//! source file and every recorded destination file, on one thread. Whatever distributor
//! does beyond this to decide "unchanged" is its overhead. Used by
//! `benches/plan_scale.py`.
//!
//!     cargo run --release --example floor -- SOURCE_DIR BUNDLE_PATH

use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct Paths {
    outputs: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    path: String,
}

fn read(file: &Path) -> Paths {
    let bytes = std::fs::read(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("{}: {e}", file.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, source, bundle] = args.as_slice() else {
        eprintln!("usage: floor SOURCE_DIR BUNDLE_PATH");
        std::process::exit(2);
    };
    let (source, bundle) = (Path::new(source), Path::new(bundle));
    let manifest = read(&source.join("distributor-manifest.json"));
    let state = read(&bundle.join(".distributor.json"));
    let mut bytes = 0u64;
    for o in &manifest.outputs {
        bytes += std::fs::symlink_metadata(source.join(&o.path))
            .expect("lstat source")
            .len();
    }
    for o in &state.outputs {
        bytes += std::fs::symlink_metadata(bundle.join(&o.path))
            .expect("lstat destination")
            .len();
    }
    println!(
        "{} source files, {} recorded files, {bytes} bytes",
        manifest.outputs.len(),
        state.outputs.len()
    );
}
