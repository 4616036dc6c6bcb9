//! Script tools: tools written the way the AssistantTool API has them, as a folder with a
//! manifest (`assistant_tool.json`) and code (`assistant_tool.tsx`, `.ts` or `.js`) that
//! registers its functions on the `AssistantTool` global.
//!
//! ```ts
//! const executeTool = async (params: { query: string }) => {
//!   const found: string[] = []
//!   AssistantTool.onCancel = () => ["Cancelled by the user.", "Partial results:", ...found].join("\n")
//!   for (const source of sources) {
//!     if (AssistantTool.isCancelled) break
//!     found.push(await search(source, params.query))
//!     AssistantTool.report(`searched ${found.length} of ${sources.length}`)
//!   }
//!   return { success: true, message: found.join("\n") }
//! }
//! AssistantTool.registerExecuteTool(executeTool)
//! ```
//!
//! The code runs in an embedded JavaScript engine (QuickJS, through rquickjs); TypeScript is
//! accepted and its types are stripped at load (oxc). No node is needed.
//!
//! What the API says, here:
//! - `AssistantTool.isCancelled` is true as soon as the call is cancelled; `onCancel`, set inside
//!   the execute function, gives the partial result the model reads; results returned after a
//!   cancel are ignored. Each call runs in its own engine, so one call's `onCancel` never
//!   reaches another's.
//! - `{ success: true, message }` is the result; `success: false` is an error result.
//! - `report(message, id?)` is progress, shown to the user, never to the model.
//! - With `requireApproval`, `registerApprovalRequest`'s function builds the question and
//!   `registerExecuteToolWithApproval`'s function gets `{ primaryConfirmed, secondaryConfirmed }`.
//!   A declined call never runs the execute function; the model reads the message of
//!   `AssistantTool.registerDeclinedMessage((params, reason) => text)` if the code registers
//!   one (Agentry's addition), or the standard declined text.
//! - `setTimeout`/`setInterval`, promises and `await` run on the engine's own event loop;
//!   `console` goes to the log; `fetch` works only when the manifest sets `"network": true` and
//!   the user allows it ([`ScriptSettings::allow_network`]). There is no file system.
//! - A call's memory is limited ([`ScriptSettings::memory_limit`]). A script that keeps the
//!   engine busy is interrupted to run its `onCancel`, and stopped once the agent no longer
//!   waits for it.
//!
//! ```no_run
//! use agentry::tool::Toolkit;
//! use agentry_script::{ScriptSettings, ScriptTools};
//!
//! let toolkit = Toolkit::new();
//! let mut tools = ScriptTools::load(&["tools".into()], &ScriptSettings::default());
//! tools.register(&toolkit);
//! for error in &tools.errors {
//!     eprintln!("not loaded: {error}");
//! }
//! ```

mod dir;
mod engine;
mod error;
mod manifest;
mod source;
mod tool;

pub use dir::ScriptTools;
pub use error::{LoadError, ScriptError};
pub use manifest::Manifest;
pub use tool::{CODE_FILES, MANIFEST_FILE, ScriptSettings, ScriptTool};
