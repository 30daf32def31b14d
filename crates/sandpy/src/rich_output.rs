//! Rich outputs: what a person would see of a run in a notebook. `display(obj)`,
//! `plt.show()`, the matplotlib figures still open when the code ends, and the final
//! value each come back as one MIME bundle in [`Execution::outputs`](crate::Execution),
//! in the order the code made them.
//!
//! The guest makes the bundles (`guest/sandpy_guest/display.py`, one implementation for
//! both tiers) and bounds them by the run's budget: [`MAX_COUNT`] outputs and
//! [`Limits::output_files_bytes`] bytes together, `text/plain` cut with a marker, any
//! other format that does not fit left out whole (a cut PNG or HTML is no use) and named
//! in [`RichOutput::omitted`]. The guest's word is not trusted: the host counts again
//! here before it keeps anything, so a guest that ignores its budget gets the same cut.
//! Stream text stays in `stdout`/`stderr`: putting it in `outputs` too would double every
//! run's output.

use crate::bindings::{GuestRichOutput, GuestRichOutputKind};
use crate::Limits;
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
    /// `image/svg+xml`, `application/json`, ... as text, `image/png` and `image/jpeg` as
    /// base64.
    pub data: BTreeMap<String, String>,
    /// Mime types the object had but that were not kept, each with why (over the run's
    /// budget, or its `_repr_*_` method failed).
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
        const ORDER: [&str; 7] = [
            "image/png",
            "image/jpeg",
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

/// The guest's outputs, checked against the run's budget again: at most [`MAX_COUNT`]
/// kept, their bytes together at most `limits.output_files_bytes`. Returns the outputs
/// kept and how many were dropped (the guest's count plus the host's).
pub(crate) fn from_guest(
    outputs: Vec<GuestRichOutput>,
    dropped: u32,
    limits: &Limits,
) -> (Vec<RichOutput>, u64) {
    let mut left = limits.output_files_bytes;
    let mut dropped = u64::from(dropped);
    let mut kept = Vec::new();
    for output in outputs {
        if kept.len() >= MAX_COUNT as usize || left == 0 {
            dropped += 1;
            continue;
        }
        let mut data = BTreeMap::new();
        let mut omitted: BTreeMap<String, String> = output.omitted.into_iter().collect();
        for (mime, value) in output.data {
            let size = value.len() as u64;
            if size <= left {
                left -= size;
                data.insert(mime, value);
            } else if mime == "text/plain" {
                data.insert(mime, cut(&value, left));
                left = 0;
            } else {
                omitted.insert(
                    mime,
                    format!("{size} bytes, over the run's rich-output budget"),
                );
            }
        }
        data.entry("text/plain".into()).or_default();
        kept.push(RichOutput {
            kind: match output.kind {
                GuestRichOutputKind::DisplayData => RichOutputKind::Display,
                GuestRichOutputKind::ExecuteResult => RichOutputKind::Result,
            },
            data,
            omitted,
        });
    }
    (kept, dropped)
}

/// `text` cut to at most `budget` bytes, ending with the marker when it fits.
fn cut(text: &str, budget: u64) -> String {
    let budget = usize::try_from(budget).unwrap_or(usize::MAX);
    let marker = if budget >= CUT_MARKER.len() {
        CUT_MARKER
    } else {
        ""
    };
    let mut end = budget - marker.len();
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{marker}", &text[..end])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guest(kind: GuestRichOutputKind, data: &[(&str, String)]) -> GuestRichOutput {
        GuestRichOutput {
            kind,
            data: data
                .iter()
                .map(|(m, v)| (m.to_string(), v.clone()))
                .collect(),
            omitted: Vec::new(),
        }
    }

    #[test]
    fn the_host_enforces_the_budget_a_guest_ignored() {
        let limits = Limits {
            output_files_bytes: 1_000,
            ..Limits::default()
        };
        let big = "x".repeat(5_000);
        let outputs: Vec<_> = (0..150)
            .map(|_| {
                guest(
                    GuestRichOutputKind::DisplayData,
                    &[("text/plain", "a".into()), ("text/html", big.clone())],
                )
            })
            .collect();
        let (kept, dropped) = from_guest(outputs, 3, &limits);
        assert_eq!(kept.len(), MAX_COUNT as usize);
        assert_eq!(dropped, 3 + 50);
        assert_eq!(kept[0].text(), "a");
        assert_eq!(kept[0].get("text/html"), None);
        assert!(kept[0].omitted["text/html"].contains("5000 bytes"));
        let total: usize = kept
            .iter()
            .flat_map(|o| o.data.values())
            .map(String::len)
            .sum();
        assert!(total <= 1_000, "{total}");
    }

    #[test]
    fn a_long_plain_text_is_cut_with_a_marker() {
        let limits = Limits {
            output_files_bytes: 200,
            ..Limits::default()
        };
        let output = guest(
            GuestRichOutputKind::ExecuteResult,
            &[("text/plain", "é".repeat(500))],
        );
        let (kept, dropped) = from_guest(vec![output.clone(), output], 0, &limits);
        assert_eq!((kept.len(), dropped), (1, 1));
        assert!(kept[0].text().ends_with(CUT_MARKER));
        assert!(kept[0].text().len() <= 200);
        assert_eq!(kept[0].kind, RichOutputKind::Result);
    }
}
