//! The command-line flags of the bench binaries that take `--name VALUE` pairs.

/// The value after `name` in `args`, if `name` is there.
pub fn flag(args: &[String], name: &str) -> Option<String> {
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1).cloned())
}
