//! Rich outputs: what a person would see of a run in a notebook. `display(obj)`,
//! `plt.show()`, the matplotlib figures still open when the code ends, and the final
//! value each come back as one MIME bundle in [`Execution::outputs`](crate::Execution),
//! in the order the code made them.
//!
//! The guest makes the bundles (`guest/sandpy_guest/display.py`, one implementation for
//! both tiers) and bounds them by the run's budget: [`MAX_COUNT`] outputs and
//! [`Limits::output_files_bytes`](crate::Limits::output_files_bytes) bytes together, `text/plain` cut with a marker, any
//! other format that does not fit left out whole (a cut PNG or HTML is no use) and named
//! in [`RichOutput::omitted`]. The guest's word is not trusted: the host checks every
//! bundle again in [`crate::guest_report`] before it keeps anything (keys and `omitted`
//! reasons counted too, names plain, images decoded), so a guest that ignores its budget
//! gets the same cut.
//! Stream text stays in `stdout`/`stderr`: putting it in `outputs` too would double every
//! run's output.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The most rich outputs one run keeps; the rest are counted in
/// [`Execution::outputs_dropped`](crate::Execution::outputs_dropped).
pub const MAX_COUNT: u32 = 100;

/// Marks a `text/plain` cut at the budget.
pub(crate) const CUT_MARKER: &str =
    "\n[... truncated by sandpy: the run's rich-output budget is spent]";

/// Where a rich output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum RichOutputKind {
    /// `display(obj)`, `plt.show()`, or a figure still open when the code ended
    /// (Jupyter's `display_data`).
    Display,
    /// The final expression's value (Jupyter's `execute_result`); also in
    /// [`Execution::return_value`](crate::Execution::return_value).
    Result,
}

/// One MIME bundle, as IPython makes it from the object's `_repr_*_` methods.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RichOutput {
    /// Where it came from.
    pub kind: RichOutputKind,
    /// Mime type to data: `text/plain` always; `text/html`, `text/markdown`,
    /// `image/svg+xml`, `application/json`, ... as text; `image/png`, `image/jpeg`,
    /// `image/gif` and `image/webp` as base64, each checked by the host to decode as that
    /// format (no other binary type is kept). Every key is a plain `type/subtype`.
    pub data: BTreeMap<String, String>,
    /// Mime types the object had but that were not kept, each with why (over the run's
    /// budget, its `_repr_*_` method failed, an image that did not decode), on one line;
    /// `*` for what has no plain mime type to name it by.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub omitted: BTreeMap<String, String>,
}

impl RichOutput {
    /// The data of one mime type.
    pub fn get(&self, mime: &str) -> Option<&str> {
        self.data.get(mime).map(String::as_str)
    }

    /// The bundle's `text/plain`.
    pub fn text(&self) -> &str {
        self.get("text/plain").unwrap_or("")
    }

    /// True for the mime types whose data is base64 (`image/png`, `image/jpeg`, ...; not
    /// `image/svg+xml`, which is text).
    pub fn is_binary(mime: &str) -> bool {
        mime.starts_with("image/") && !mime.ends_with("+xml")
    }

    /// The format a person would be shown of this bundle, richest first: an image, then
    /// HTML, Markdown, SVG, JSON, LaTeX, and `text/plain` last.
    pub fn richest(&self) -> (&str, &str) {
        const ORDER: [&str; 9] = [
            "image/png",
            "image/jpeg",
            "image/gif",
            "image/webp",
            "text/html",
            "text/markdown",
            "image/svg+xml",
            "application/json",
            "text/latex",
        ];
        ORDER
            .iter()
            .find_map(|mime| self.data.get_key_value(*mime))
            .map(|(mime, data)| (mime.as_str(), data.as_str()))
            .unwrap_or(("text/plain", self.text()))
    }
}
