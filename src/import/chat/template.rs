//! A model's chat template, rendered as HuggingFace's `apply_chat_template`
//! renders it: the Jinja source of `tokenizer_config.json` (or the folder's
//! `chat_template.jinja`, or `--chat-template FILE`), evaluated by minijinja
//! with `trim_blocks` and `lstrip_blocks` on (as transformers compiles it),
//! `add_generation_prompt=true`, the tokenizer's `bos_token`/`eos_token`,
//! and the functions and methods HF templates call: `raise_exception`,
//! `strftime_now`, `tojson` and Python's string and dict methods
//! (minijinja-contrib's `pycompat`).

use std::path::{Path, PathBuf};

use minijinja::value::Value;
use minijinja::{Environment, Error as JinjaError, ErrorKind};

/// The context variable `strftime_now` reads: the request's time (unix s),
/// so a template that prints today's date prints the day of the request
/// and the output does not change with the day of the import.
const NOW_VAR: &str = "__mctrace_request_time";

/// Why no template could be had.
#[derive(Debug, thiserror::Error)]
pub enum TemplateError {
    #[error("{}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: not JSON: {source}", path.display())]
    Config {
        path: PathBuf,
        source: serde_json::Error,
    },
    #[error(
        "{}: no chat template (neither a `chat_template` in tokenizer_config.json nor a \
         chat_template.jinja beside it); pass the model's template with --chat-template FILE",
        .0.display()
    )]
    Missing(PathBuf),
    #[error("the chat template ({where_}) does not compile: {source:#}")]
    Compile { where_: String, source: JinjaError },
}

/// A compiled chat template with the tokenizer's special tokens.
pub struct ChatTemplate {
    env: Environment<'static>,
    bos: String,
    eos: String,
    /// Where the template came from (for the summary line).
    pub source: String,
}

/// A special token as tokenizer_config.json writes it: a string, or an
/// `AddedToken` object with its `content`.
fn token_text(v: Option<&serde_json::Value>) -> String {
    match v {
        Some(serde_json::Value::String(s)) => s.clone(),
        Some(serde_json::Value::Object(o)) => o
            .get("content")
            .and_then(|c| c.as_str())
            .unwrap_or_default()
            .to_string(),
        _ => String::new(),
    }
}

/// `chat_template` as tokenizer_config.json writes it: a string, or a list
/// of `{name, template}` of which `default` is the one HF uses.
fn config_template(v: Option<&serde_json::Value>) -> Option<String> {
    match v? {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Array(list) => {
            let named = |name: &str| {
                list.iter()
                    .find(|t| t.get("name").and_then(|n| n.as_str()) == Some(name))
            };
            named("default")
                .or(list.first())
                .and_then(|t| t.get("template"))
                .and_then(|t| t.as_str())
                .map(str::to_string)
        }
        _ => None,
    }
}

impl ChatTemplate {
    /// The template of the tokenizer folder `dir` (its tokenizer_config.json
    /// gives the special tokens and, unless `file` is given, the template).
    pub fn load(dir: &Path, file: Option<&Path>) -> Result<Self, TemplateError> {
        let config_path = dir.join("tokenizer_config.json");
        let config: serde_json::Value = match std::fs::read(&config_path) {
            Ok(bytes) => {
                serde_json::from_slice(&bytes).map_err(|source| TemplateError::Config {
                    path: config_path.clone(),
                    source,
                })?
            }
            // A folder without a config: no special tokens, and the
            // template must come from a file.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Value::Null,
            Err(source) => {
                return Err(TemplateError::Read {
                    path: config_path,
                    source,
                })
            }
        };
        let read = |path: &Path| {
            std::fs::read_to_string(path).map_err(|source| TemplateError::Read {
                path: path.to_path_buf(),
                source,
            })
        };
        let jinja_file = dir.join("chat_template.jinja");
        let (text, source) = if let Some(f) = file {
            (read(f)?, f.display().to_string())
        } else if let Some(t) = config_template(config.get("chat_template")) {
            (t, config_path.display().to_string())
        } else if jinja_file.is_file() {
            (read(&jinja_file)?, jinja_file.display().to_string())
        } else {
            return Err(TemplateError::Missing(config_path));
        };
        Self::new(
            &text,
            &token_text(config.get("bos_token")),
            &token_text(config.get("eos_token")),
            source,
        )
    }

    /// A template from its source text and special tokens.
    pub fn new(text: &str, bos: &str, eos: &str, source: String) -> Result<Self, TemplateError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| TemplateError::Compile {
                where_: source.clone(),
                source: e,
            })?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", text.to_string())
            .map_err(|e| TemplateError::Compile {
                where_: source.clone(),
                source: e,
            })?;
        Ok(ChatTemplate {
            env,
            bos: bos.to_string(),
            eos: eos.to_string(),
            source,
        })
    }

    /// The prompt text of `messages` (and `tools`, when the request had
    /// them) at unix time `now_s`; `Err` is the template's own complaint
    /// (e.g. roles that do not alternate), for the line's error.
    pub fn render(
        &self,
        messages: &[serde_json::Value],
        tools: Option<&serde_json::Value>,
        now_s: f64,
    ) -> Result<String, String> {
        let tpl = self
            .env
            .get_template("chat")
            .map_err(|e| format!("{e:#}"))?;
        let mut ctx = vec![
            ("messages", messages.iter().map(to_value).collect()),
            ("add_generation_prompt", Value::from(true)),
            ("bos_token", Value::from(self.bos.as_str())),
            ("eos_token", Value::from(self.eos.as_str())),
            (NOW_VAR, Value::from(now_s)),
        ];
        if let Some(t) = tools {
            ctx.push(("tools", to_value(t)));
        }
        tpl.render(Value::from_pairs(ctx)).map_err(|e| {
            // The template's own words (raise_exception) are the message;
            // minijinja's location in the template follows.
            match e.detail() {
                Some(d) if e.kind() == ErrorKind::InvalidOperation => d.to_string(),
                _ => format!("{e:#}"),
            }
        })
    }
}

/// A JSON value as a template value (objects keep their keys sorted, as
/// serde_json holds them).
pub fn to_value(v: &serde_json::Value) -> Value {
    match v {
        serde_json::Value::Null => Value::from(()),
        serde_json::Value::Bool(b) => Value::from(*b),
        serde_json::Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => Value::from(i),
            (_, Some(u)) => Value::from(u),
            _ => Value::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        serde_json::Value::String(s) => Value::from(s.as_str()),
        serde_json::Value::Array(a) => a.iter().map(to_value).collect(),
        serde_json::Value::Object(o) => {
            Value::from_pairs(o.iter().map(|(k, v)| (k.as_str(), to_value(v))))
        }
    }
}

/// A template value as JSON (for `tojson`).
fn to_json(v: &Value) -> Result<serde_json::Value, JinjaError> {
    use minijinja::value::ValueKind;
    Ok(match v.kind() {
        ValueKind::Undefined | ValueKind::None => serde_json::Value::Null,
        ValueKind::Bool => serde_json::Value::Bool(v.is_true()),
        ValueKind::Number => {
            if let Ok(i) = i64::try_from(v.clone()) {
                i.into()
            } else {
                let f = f64::try_from(v.clone())?;
                serde_json::Number::from_f64(f).map_or(serde_json::Value::Null, Into::into)
            }
        }
        ValueKind::String => serde_json::Value::String(v.as_str().unwrap_or_default().into()),
        ValueKind::Seq | ValueKind::Iterable => serde_json::Value::Array(
            v.try_iter()?
                .map(|x| to_json(&x))
                .collect::<Result<_, _>>()?,
        ),
        ValueKind::Map => {
            let mut o = serde_json::Map::new();
            for k in v.try_iter()? {
                let val = v.get_item(&k)?;
                o.insert(k.to_string(), to_json(&val)?);
            }
            serde_json::Value::Object(o)
        }
        _ => serde_json::Value::String(v.to_string()),
    })
}

/// Python's `json.dumps(x, ensure_ascii=False)` spacing: `", "` between
/// items and `": "` after keys (transformers' `tojson`), no HTML escaping.
struct PySpaced;

impl serde_json::ser::Formatter for PySpaced {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        w: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        if first {
            Ok(())
        } else {
            w.write_all(b", ")
        }
    }
    fn begin_object_value<W: ?Sized + std::io::Write>(&mut self, w: &mut W) -> std::io::Result<()> {
        w.write_all(b": ")
    }
}

/// `x | tojson` (with an optional `indent`, as `json.dumps` indents).
fn tojson(v: Value, indent: Option<usize>) -> Result<Value, JinjaError> {
    use serde::Serialize;
    let json = to_json(&v)?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let pad = vec![b' '; n];
            let mut ser = serde_json::Serializer::with_formatter(
                &mut out,
                serde_json::ser::PrettyFormatter::with_indent(&pad),
            );
            json.serialize(&mut ser)
        }
        None => json.serialize(&mut serde_json::Serializer::with_formatter(
            &mut out, PySpaced,
        )),
    };
    written.map_err(|e| JinjaError::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(
        String::from_utf8(out).unwrap_or_default(),
    ))
}

/// `raise_exception(msg)`: the template refuses the messages.
fn raise_exception(msg: String) -> Result<Value, JinjaError> {
    Err(JinjaError::new(ErrorKind::InvalidOperation, msg))
}

/// `strftime_now(fmt)`: the request's time in UTC, with the directives
/// HF templates use (`%d %b %Y`, `%B`, `%m`, `%y`, `%H:%M:%S`, `%A`, `%a`).
fn strftime_now(state: &minijinja::State, fmt: String) -> Result<Value, JinjaError> {
    let now = state
        .lookup(NOW_VAR)
        .and_then(|v| f64::try_from(v).ok())
        .unwrap_or(0.0);
    Ok(Value::from(strftime(&fmt, now)))
}

/// `fmt` with the directives above filled in from `unix_s` (UTC).
pub fn strftime(fmt: &str, unix_s: f64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let secs = unix_s.floor() as i64;
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    let month = MONTHS[(m - 1) as usize];
    let day = DAYS[days.rem_euclid(7) as usize];
    let mut out = String::new();
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y.rem_euclid(100))),
            Some('b') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&day[..3]),
            Some('A') => out.push_str(day),
            Some('H') => out.push_str(&format!("{:02}", sod / 3600)),
            Some('M') => out.push_str(&format!("{:02}", sod / 60 % 60)),
            Some('S') => out.push_str(&format!("{:02}", sod % 60)),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// Days since 1970-01-01 to (year, month, day): Howard Hinnant's
/// `civil_from_days`.
fn civil_from_days(z: i64) -> (i64, i64, i64) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn render(
        t: &ChatTemplate,
        messages: &serde_json::Value,
        tools: Option<&serde_json::Value>,
        now: f64,
    ) -> Result<String, String> {
        t.render(messages.as_array().unwrap(), tools, now)
    }

    fn tpl(text: &str) -> ChatTemplate {
        ChatTemplate::new(text, "<s>", "</s>", "test".into()).unwrap()
    }

    #[test]
    fn renders_as_hf_does_with_trimmed_blocks() {
        // A Zephyr-like template: `{% ... %}` lines leave no newline behind
        // (trim_blocks), and the generation prompt is added.
        let t = tpl("{{ bos_token }}{% for m in messages %}\n<|{{ m['role'] }}|> {{ m['content'].strip() }}\n{% endfor %}\n{% if add_generation_prompt %}<|assistant|>{% endif %}");
        let msgs =
            json!([{"role": "system", "content": " be brief "}, {"role": "user", "content": "hi"}]);
        assert_eq!(
            render(&t, &msgs, None, 0.0).unwrap(),
            "<s><|system|> be brief\n<|user|> hi\n<|assistant|>"
        );
    }

    #[test]
    fn raise_exception_is_the_error() {
        let t = tpl("{% if messages[0]['role'] != 'user' %}{{ raise_exception('Conversation must start with a user') }}{% endif %}ok");
        let err = render(&t, &json!([{"role": "system", "content": "x"}]), None, 0.0).unwrap_err();
        assert!(err.contains("Conversation must start with a user"), "{err}");
        assert_eq!(
            render(&t, &json!([{"role": "user", "content": "x"}]), None, 0.0).unwrap(),
            "ok"
        );
    }

    #[test]
    fn tojson_spaces_as_python_and_escapes_no_html() {
        let t = tpl("{{ tools | tojson }}|{% for x in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ x.content.startswith('a') }}{% endfor %}");
        let tools = json!([{"name": "f<x>", "n": [1, 2]}]);
        let out = render(
            &t,
            &json!([{"role": "user", "content": "ab"}, {"role": "user", "content": "b"}]),
            Some(&tools),
            0.0,
        )
        .unwrap();
        // A boolean prints as Python prints it.
        assert_eq!(out, r#"[{"n": [1, 2], "name": "f<x>"}]|True"#);
    }

    #[test]
    fn strftime_now_is_the_request_day() {
        // 2024-07-26 12:34:56 UTC is 1721997296 (a Friday).
        assert_eq!(strftime("%d %b %Y", 1_721_997_296.0), "26 Jul 2024");
        assert_eq!(
            strftime("%A %B %m/%y %H:%M:%S %%", 1_721_997_296.0),
            "Friday July 07/24 12:34:56 %"
        );
        assert_eq!(strftime("%d %b %Y", 0.0), "01 Jan 1970");
        let t = tpl("{{ strftime_now('%d %b %Y') }}");
        assert_eq!(
            render(&t, &json!([]), None, 951_782_400.0).unwrap(),
            "29 Feb 2000"
        );
    }

    #[test]
    fn the_template_comes_from_the_config_or_a_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("tokenizer_config.json"),
            r#"{"bos_token": {"__type": "AddedToken", "content": "<B>"}, "eos_token": "<E>",
                "chat_template": [{"name": "tool_use", "template": "T"}, {"name": "default", "template": "{{ bos_token }}{{ eos_token }}"}]}"#,
        )
        .unwrap();
        let t = ChatTemplate::load(dir.path(), None).unwrap();
        assert_eq!(render(&t, &json!([]), None, 0.0).unwrap(), "<B><E>");
        let f = dir.path().join("x.jinja");
        std::fs::write(&f, "file {{ bos_token }}").unwrap();
        let t = ChatTemplate::load(dir.path(), Some(&f)).unwrap();
        assert_eq!(render(&t, &json!([]), None, 0.0).unwrap(), "file <B>");
        std::fs::write(dir.path().join("tokenizer_config.json"), "{}").unwrap();
        let err = ChatTemplate::load(dir.path(), None)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("--chat-template"), "{err}");
    }

    /// Two templates in the style of HF's (Qwen's ChatML with tools,
    /// Llama 3's with a date and an alternation check), rendered by Python's
    /// jinja2 3.1.6 with transformers' settings (trim_blocks, lstrip_blocks,
    /// its tojson, strftime_now at 2024-07-26 12:34:56 UTC): the expected
    /// strings are jinja2's output.
    #[test]
    fn renders_what_jinja2_renders() {
        const QWEN: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- else %}
    {%- if messages[0]['role'] == 'system' %}
        {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == "user" or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content.strip() + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;
        const LLAMA: &str = r#"{% set loop_messages = messages %}
{% if not date_string is defined %}
    {% set date_string = strftime_now("%d %b %Y") %}
{% endif %}
{% for message in loop_messages %}
{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) and message['role'] != 'system' %}
{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}
{% endif %}
{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'+ message['content'] | trim + '<|eot_id|>' %}
{% if loop.index0 == 0 %}
{% set content = bos_token + 'Today Date: ' + date_string + '\n' + content %}
{% endif %}
{{ content }}
{% endfor %}
{% if add_generation_prompt %}
{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}
{% endif %}
"#;
        let msgs = json!([
            {"role": "system", "content": "You are Qwen."},
            {"role": "user", "content": "  hi there \n"},
            {"role": "assistant", "content": "Hello!"},
            {"role": "user", "content": "weather?"}
        ]);
        let tools = json!([{"function": {"description": "Get weather <city>", "name": "get_weather",
            "parameters": {"properties": {"city": {"type": "string"}}, "type": "object"}}, "type": "function"}]);
        let now = 1_721_997_296.0;
        let t = ChatTemplate::new(QWEN, "<|begin_of_text|>", "<|eot_id|>", "qwen".into()).unwrap();
        assert_eq!(render(&t, &msgs, None, now).unwrap(), "<|im_start|>system\nYou are Qwen.<|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(render(&t, &msgs, Some(&tools), now).unwrap(), "<|im_start|>system\nYou are Qwen.\n\n# Tools\n<tools>\n{\"function\": {\"description\": \"Get weather <city>\", \"name\": \"get_weather\", \"parameters\": {\"properties\": {\"city\": {\"type\": \"string\"}}, \"type\": \"object\"}}, \"type\": \"function\"}\n</tools><|im_end|>\n<|im_start|>user\nhi there<|im_end|>\n<|im_start|>assistant\nHello!<|im_end|>\n<|im_start|>user\nweather?<|im_end|>\n<|im_start|>assistant\n");
        let t =
            ChatTemplate::new(LLAMA, "<|begin_of_text|>", "<|eot_id|>", "llama".into()).unwrap();
        let rest = serde_json::Value::Array(msgs.as_array().unwrap()[1..].to_vec());
        assert_eq!(render(&t, &rest, None, now).unwrap(), "<|begin_of_text|>Today Date: 26 Jul 2024\n<|start_header_id|>user<|end_header_id|>\n\nhi there<|eot_id|>\n<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>\n<|start_header_id|>user<|end_header_id|>\n\nweather?<|eot_id|>\n<|start_header_id|>assistant<|end_header_id|>\n\n\n");
        let err = render(
            &t,
            &json!([{"role": "assistant", "content": "x"}]),
            None,
            now,
        )
        .unwrap_err();
        assert_eq!(
            err,
            "Conversation roles must alternate user/assistant/user/assistant/..."
        );
    }
}
