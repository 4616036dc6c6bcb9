//! Everything the terminal shows and reads: the driver of a reply (events drawn, approval
//! questions asked, Ctrl-C), prompt editing, the live lines, the renderer, the ledger lines, and
//! the escaping that keeps model and tool text from driving the terminal.

pub mod driver;
pub mod form;
pub mod input;
pub mod ledger;
pub mod live;
pub mod output;
pub mod plan_view;
pub mod render;
pub mod sanitize;

pub use driver::{Outcome, Terminal, received};
