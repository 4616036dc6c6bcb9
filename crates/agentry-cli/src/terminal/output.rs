//! Standard output for the commands that print what they were asked for (`sessions export`,
//! `mcp list`, ...): a reader that goes away (`| head`) ends the command quietly, with exit 0,
//! instead of a panic and a backtrace.

use std::io::{ErrorKind, Write};

/// Prints a line on stdout; when nobody reads it any more, exits at once, quietly, with 0.
pub fn line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    if let Err(e) = out.write_fmt(args).and_then(|()| out.write_all(b"\n")) {
        exit_if_closed(&e);
        // Any other error: the output is lost, as `println!` would have reported by panicking.
        eprintln!("error: cannot write to stdout: {e}");
        std::process::exit(1);
    }
}

/// Exits quietly with 0 when `error` says that the reader of stdout went away.
pub fn exit_if_closed(error: &std::io::Error) {
    if error.kind() == ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
}

/// `println!` that ends the command quietly when stdout's reader went away.
macro_rules! outln {
    () => {
        $crate::terminal::output::line(format_args!(""))
    };
    ($($arg:tt)*) => {
        $crate::terminal::output::line(format_args!($($arg)*))
    };
}
pub(crate) use outln;
