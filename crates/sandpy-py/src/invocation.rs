//! One host call as `sandpy._host` gets it ([`Invocation`]): the function and the guest's
//! arguments as compact JSON text ([`Arguments`]), made into Python objects only when the
//! call starts, and what they are taken to weigh meanwhile (the bounds of waiting calls
//! count it).
//!
//! Why text: a call that waits for a thread holds its arguments until it starts or its run
//! stops waiting. As a `serde_json::Value` a list of 230,000 empty objects is 7.4 MB (32
//! bytes a value), as text 690 KB; as Python objects, made at once (as before issue 60),
//! about 18 MB.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// A call's arguments as the guest sent them (as JSON text), until the call starts.
pub(crate) struct Arguments {
    /// An object (a tool's: its members are keyword arguments) or an array (an `approve`
    /// hook's: positional).
    text: String,
    keywords: bool,
    weight: usize,
}

/// What one JSON value is taken to take as a Python object, besides its text: an empty
/// `dict` is 64 bytes, a `list` 56, an `int` 28, with 16 more for the collector's header.
const PY_VALUE_BYTES: usize = 64;

impl Arguments {
    /// A tool's arguments (a JSON object): keyword arguments.
    pub(crate) fn keywords(arguments: Value) -> Arguments {
        Arguments {
            weight: weight(&arguments),
            text: arguments.to_string(),
            keywords: true,
        }
    }

    /// Positional arguments.
    pub(crate) fn positional(arguments: &[&Value]) -> Arguments {
        Arguments {
            weight: arguments.iter().map(|value| weight(value)).sum(),
            // A `Value` always serialises (its keys are strings).
            text: serde_json::to_string(arguments).unwrap_or_else(|_| "[]".into()),
            keywords: false,
        }
    }

    /// About what the arguments take as Python objects once made (as JSON text, much
    /// less): what the bounds of waiting calls count.
    pub(crate) fn weight(&self) -> usize {
        self.weight
    }
}

/// [`Arguments::weight`] of one value: [`PY_VALUE_BYTES`] per value, and the text of
/// strings and keys (serde_json bounds the depth, so the recursion is bounded).
fn weight(value: &Value) -> usize {
    PY_VALUE_BYTES
        + match value {
            Value::String(s) => s.len(),
            Value::Array(items) => items.iter().map(weight).sum(),
            Value::Object(map) => map
                .iter()
                .map(|(key, item)| PY_VALUE_BYTES + key.len() + weight(item))
                .sum(),
            _ => 0,
        }
}

/// One call handed to `sandpy._host`: the function and the guest's arguments, which
/// become Python objects only when the call starts ([`Invocation::take`], on the pool's
/// thread or on the loop). A call cancelled before that drops it, and the JSON with it.
/// The function is called from Python, not from here: a daemon thread that is still in a
/// tool when the interpreter exits then has no Rust frame on its stack to unwind.
#[pyclass(frozen, module = "sandpy._sandpy")]
pub(crate) struct Invocation {
    function: Arc<Py<PyAny>>,
    arguments: Mutex<Option<Arguments>>,
}

impl Invocation {
    /// A call of `function` with `arguments`.
    pub(crate) fn new(function: Arc<Py<PyAny>>, arguments: Arguments) -> Invocation {
        Invocation {
            function,
            arguments: Mutex::new(Some(arguments)),
        }
    }
}

#[pymethods]
impl Invocation {
    /// `(function, text, keywords)`, once: the function, its arguments as JSON text (an
    /// object of keyword arguments when `keywords`, else an array of positional ones), for
    /// `sandpy._host` to parse with `json.loads` (as the library parsed them: integers
    /// beyond 64 bits cannot occur, serde_json having made them floats) and call.
    fn take(&self, py: Python<'_>) -> PyResult<(Py<PyAny>, String, bool)> {
        let arguments = self
            .arguments
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .take()
            .ok_or_else(|| PyValueError::new_err("a host call is made once"))?;
        Ok((
            self.function.clone_ref(py),
            arguments.text,
            arguments.keywords,
        ))
    }
}
