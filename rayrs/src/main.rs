//! The `rayrs` binary: see the library's docs.

fn main() -> std::process::ExitCode {
    rayrs::main()
}
