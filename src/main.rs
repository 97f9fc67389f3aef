fn main() -> std::process::ExitCode {
    distributor::cli::main()
}
