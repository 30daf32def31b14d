//! Values across the boundary: JSON (what runs return and tools exchange) to Python objects
//! and back, and the keyword arguments every run takes, checked into a [`RunArgs`].

use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyBytes, PyDict, PyFloat, PyInt, PyList, PyString, PyTuple};
use pyo3::IntoPyObjectExt;
use sandpy::files::InputFile;
use sandpy::settings::Settings;
use sandpy::{LimitOverrides, OutputSink, Policy, RunOptions, Stream};
use serde_json::Value;

/// A JSON value as the Python object `json.loads` would give.
pub(crate) fn json_to_py<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match value {
        Value::Null => py.None().into_bound(py),
        Value::Bool(b) => b.into_bound_py_any(py)?,
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_bound_py_any(py)?,
            (None, Some(u)) => u.into_bound_py_any(py)?,
            // serde_json keeps integers beyond 64 bits only with `arbitrary_precision`
            // (off), so anything else is a float.
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py)?,
        },
        Value::String(s) => s.into_bound_py_any(py)?,
        Value::Array(items) => {
            let list = PyList::empty(py);
            for item in items {
                list.append(json_to_py(py, item)?)?;
            }
            list.into_any()
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, item) in map {
                dict.set_item(key, json_to_py(py, item)?)?;
            }
            dict.into_any()
        }
    })
}

/// A Python object as JSON: `None`, `bool`, `int` (64-bit), finite `float`, `str`, lists and
/// tuples, dicts with `str` keys. Anything else is a `TypeError` naming where it was found
/// (`what` is the argument's name, e.g. `args[2]["when"]`).
pub(crate) fn py_to_json(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Value> {
    py_to_json_at(obj, what, 0)
}

/// Deeper than this is refused (a cycle, or nesting no JSON document needs).
const MAX_DEPTH: usize = 200;

fn py_to_json_at(obj: &Bound<'_, PyAny>, what: &str, depth: usize) -> PyResult<Value> {
    if depth > MAX_DEPTH {
        return Err(PyValueError::new_err(format!(
            "{what}: nested deeper than {MAX_DEPTH} levels (a cycle?)"
        )));
    }
    if obj.is_none() {
        return Ok(Value::Null);
    }
    if let Ok(b) = obj.cast::<PyBool>() {
        return Ok(Value::Bool(b.is_true()));
    }
    if obj.is_instance_of::<PyInt>() {
        if let Ok(i) = obj.extract::<i64>() {
            return Ok(Value::from(i));
        }
        if let Ok(u) = obj.extract::<u64>() {
            return Ok(Value::from(u));
        }
        return Err(PyValueError::new_err(format!(
            "{what}: the integer {obj} does not fit in 64 bits (JSON numbers here do)"
        )));
    }
    if let Ok(f) = obj.cast::<PyFloat>() {
        let value = f.value();
        return serde_json::Number::from_f64(value)
            .map(Value::Number)
            .ok_or_else(|| PyValueError::new_err(format!("{what}: {value} is not a JSON number")));
    }
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(Value::String(s.to_str()?.to_owned()));
    }
    if obj.is_instance_of::<PyList>() || obj.is_instance_of::<PyTuple>() {
        let mut items = Vec::new();
        for (i, item) in obj.try_iter()?.enumerate() {
            items.push(py_to_json_at(&item?, &format!("{what}[{i}]"), depth + 1)?);
        }
        return Ok(Value::Array(items));
    }
    if let Ok(dict) = obj.cast::<PyDict>() {
        let mut map = serde_json::Map::new();
        for (key, item) in dict.iter() {
            let Ok(key) = key.cast::<PyString>() else {
                return Err(PyTypeError::new_err(format!(
                    "{what}: dict keys must be str for JSON, found {}",
                    type_name(&key)
                )));
            };
            let key = key.to_str()?.to_owned();
            let value = py_to_json_at(&item, &format!("{what}[{key:?}]"), depth + 1)?;
            map.insert(key, value);
        }
        return Ok(Value::Object(map));
    }
    Err(PyTypeError::new_err(format!(
        "{what}: {} is not JSON (use None, bool, int, float, str, list, tuple or dict)",
        type_name(obj)
    )))
}

/// The name of `obj`'s type, for messages.
pub(crate) fn type_name(obj: &Bound<'_, PyAny>) -> String {
    obj.get_type()
        .name()
        .map(|n| n.to_string())
        .unwrap_or_else(|_| "?".into())
}

/// `str` (as UTF-8) or `bytes`.
pub(crate) fn text_or_bytes(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.cast::<PyString>() {
        return Ok(s.to_str()?.as_bytes().to_vec());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    Err(PyTypeError::new_err(format!(
        "{what} must be str or bytes, not {}",
        type_name(obj)
    )))
}

/// The keyword arguments a run takes besides its code and tools, checked.
#[derive(Default)]
pub(crate) struct RunArgs {
    /// `timeout_ms` and `memory_mb`, over the config's and the policy's limits.
    pub overrides: LimitOverrides,
    /// `stdin`.
    pub stdin: Option<Vec<u8>>,
    /// `files`: written into `/tmp` before the code runs.
    pub files: Vec<InputFile>,
    /// `allowed_tools`.
    pub allowed_tools: Option<Vec<String>>,
    /// `policy`, if given (else the sandbox's).
    pub policy: Option<Policy>,
}

impl RunArgs {
    /// Check the arguments as Python gave them.
    pub(crate) fn parse(
        settings: &Settings,
        timeout_ms: Option<&Bound<'_, PyAny>>,
        memory_mb: Option<&Bound<'_, PyAny>>,
        stdin: Option<&Bound<'_, PyAny>>,
        files: Option<&Bound<'_, PyAny>>,
        allowed_tools: Option<Vec<String>>,
        policy: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<RunArgs> {
        let overrides = LimitOverrides {
            timeout_ms: positive("timeout_ms", timeout_ms)?,
            memory_mb: positive("memory_mb", memory_mb)?,
            ..LimitOverrides::default()
        };
        overrides
            .validate()
            .map_err(|e| PyValueError::new_err(format!("{} {}", e.key, e.requirement)))?;
        let stdin = stdin
            .filter(|s| !s.is_none())
            .map(|s| text_or_bytes(s, "stdin"))
            .transpose()?;
        let files = match files.filter(|f| !f.is_none()) {
            None => Vec::new(),
            Some(files) => {
                let dict = files.cast::<PyDict>().map_err(|_| {
                    PyTypeError::new_err(format!(
                        "files must be a dict of path -> str or bytes, not {}",
                        type_name(files)
                    ))
                })?;
                let mut out = Vec::new();
                for (path, content) in dict.iter() {
                    let path: String = path.extract().map_err(|_| {
                        PyTypeError::new_err(format!(
                            "files: paths must be str, found {}",
                            type_name(&path)
                        ))
                    })?;
                    let content = text_or_bytes(&content, &format!("files[{path:?}]"))?;
                    out.push(InputFile { path, content });
                }
                out
            }
        };
        if let Some(patterns) = &allowed_tools {
            for pattern in patterns {
                sandpy::tools::validate_tool_pattern(pattern)
                    .map_err(|e| PyValueError::new_err(format!("allowed_tools: {e}")))?;
            }
        }
        let policy = policy
            .filter(|p| !p.is_none())
            .map(|p| parse_policy(settings, p))
            .transpose()?;
        Ok(RunArgs {
            overrides,
            stdin,
            files,
            allowed_tools,
            policy,
        })
    }
}

/// An optional whole number of at least 1 (`None` means unset).
fn positive(name: &str, value: Option<&Bound<'_, PyAny>>) -> PyResult<Option<u64>> {
    let Some(value) = value.filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if !value.is_instance_of::<PyInt>() || value.is_instance_of::<PyBool>() {
        return Err(PyTypeError::new_err(format!(
            "{name} must be an int, not {}",
            type_name(value)
        )));
    }
    match value.extract::<i64>().ok() {
        None => Err(PyValueError::new_err(format!(
            "{name} is out of range: {value}"
        ))),
        Some(v) if v >= 1 => Ok(Some(v as u64)),
        Some(v) => Err(PyValueError::new_err(format!(
            "{name} must be at least 1, got {v}"
        ))),
    }
}

/// A policy given as a name (`"strict"`, `"default"`, or one the config defines) or as a
/// dict in the config's policy shape.
pub(crate) fn parse_policy(settings: &Settings, policy: &Bound<'_, PyAny>) -> PyResult<Policy> {
    if let Ok(name) = policy.cast::<PyString>() {
        let name = name.to_str()?;
        return match settings.policy(Some(name)) {
            Ok(Some(policy)) => Ok(policy),
            Ok(None) => Err(PyValueError::new_err(format!("unknown policy {name:?}"))),
            Err(unknown) => Err(PyValueError::new_err(unknown.to_string())),
        };
    }
    if policy.is_instance_of::<PyDict>() {
        let json = py_to_json(policy, "policy")?;
        let mut parsed: Policy = serde_json::from_value(json)
            .map_err(|e| PyValueError::new_err(format!("policy: {e}")))?;
        parsed
            .limits
            .validate()
            .map_err(|e| PyValueError::new_err(format!("policy: {} {}", e.key, e.requirement)))?;
        if parsed.name.is_empty() {
            parsed.name = "custom".into();
        }
        return Ok(parsed);
    }
    Err(PyTypeError::new_err(format!(
        "policy must be a name (str) or a dict, not {}",
        type_name(policy)
    )))
}

/// `on_output`: a callable `(stream, text)` (`"stdout"` or `"stderr"`, and what the program
/// wrote) called as the program writes, with the GIL taken for each call. An exception it
/// raises is reported as unraisable (`sys.unraisablehook`) and the run goes on.
pub(crate) fn output_sink(on_output: Option<&Bound<'_, PyAny>>) -> PyResult<Option<OutputSink>> {
    let Some(callable) = on_output.filter(|c| !c.is_none()) else {
        return Ok(None);
    };
    if !callable.is_callable() {
        return Err(PyTypeError::new_err(format!(
            "on_output must be a callable (stream, text), not {}",
            type_name(callable)
        )));
    }
    let callable = callable.clone().unbind();
    Ok(Some(std::sync::Arc::new(move |stream, bytes: &[u8]| {
        let name = match stream {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        };
        let text = String::from_utf8_lossy(bytes);
        Python::attach(|py| {
            if let Err(e) = callable.call1(py, (name, text.as_ref())) {
                e.write_unraisable(py, Some(callable.bind(py)));
            }
        });
    })))
}

/// The `allow_hosts` entries, or a `ValueError` naming the bad one and the forms.
pub(crate) fn allow_rules(
    entries: Option<Vec<String>>,
) -> PyResult<Vec<sandpy::network::AllowRule>> {
    entries
        .unwrap_or_default()
        .iter()
        .map(|entry| sandpy::network::AllowRule::parse(entry))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| PyValueError::new_err(format!("allow_hosts: {e}")))
}

/// A network that cannot be set up, as `SandboxError` with its cause.
pub(crate) fn network_error(error: sandpy::network::NetworkError) -> PyErr {
    let cause = std::error::Error::source(&error).map(|c| format!(": {c}"));
    crate::sandbox_error(format!("{error}{}", cause.unwrap_or_default()))
}

/// A run's own `allow_hosts`, added to the sandbox's network for this run only.
pub(crate) fn allow_hosts(options: &mut RunOptions, entries: Option<Vec<String>>) -> PyResult<()> {
    let extra = allow_rules(entries)?;
    sandpy::network::Network::allow_also(&mut options.network, &extra).map_err(network_error)
}
