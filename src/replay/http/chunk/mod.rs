//! The fast read of a streamed completion chunk: only the fields
//! [`super::sse::Choice`] needs, taken from the first choice by serde
//! visitors straight off the bytes, with no `serde_json::Value` tree (a
//! map and a string per field, per token, was most of the client's own CPU
//! per streamed token).
//!
//! It reads what the full parse ([`super::sse::classify_full`]) reads, the
//! same way: serde_json's parser checks the whole chunk (syntax, strings,
//! numbers, depth) as for a `Value`, a repeated key counts its last copy
//! as a `Value` map keeps it, and a field of the wrong type reads as
//! absent. What a [`Choice`] means is `sse`'s rule (`Choice::event`).
//! A chunk with `error` or `usage` (rare: once per stream at most),
//! or one that does not parse, is left to the full parse, which says why.

use std::borrow::Cow;
use std::fmt;

use serde::de::{self, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::Deserialize;

/// What a completion chunk's first choice says, however it was read: the
/// string fields (a field that is not a string is `None`) and whether its
/// `tool_calls` is a non-empty array.
#[derive(Debug, Default, PartialEq)]
pub struct Choice<'a> {
    pub finish_reason: Option<Cow<'a, str>>,
    /// `delta` (or `message`, when the choice has no `delta`) fields.
    pub content: Option<Cow<'a, str>>,
    pub reasoning_content: Option<Cow<'a, str>>,
    pub reasoning: Option<Cow<'a, str>>,
    pub tool_calls: bool,
    /// Completions' `text`.
    pub text: Option<Cow<'a, str>>,
}

pub mod scan;

/// The first choice of a chunk (`Some(None)`: it has none); `None` when
/// the chunk is for the full parse. The hand-written [`scan`] reads the
/// usual chunk (a tenth of serde's instructions, most of the client's own
/// CPU per token); what it does not decide goes to [`read_serde`].
pub fn read(data: &[u8]) -> Option<Option<Choice<'_>>> {
    read_with(data, &mut Memo::default())
}

/// [`read`] for the next chunk of a stream, whose `memo` remembers what
/// its chunks have in common.
pub fn read_with<'a>(data: &'a [u8], memo: &mut Memo) -> Option<Option<Choice<'a>>> {
    match scan::scan_with(data, memo) {
        scan::Scan::Read(choice) => Some(choice),
        scan::Scan::Full => None,
        scan::Scan::Unsure => read_serde(data),
    }
}

pub use scan::Memo;

/// [`read`] through serde's parser: the reference [`scan`] is checked
/// against, and its fallback.
pub fn read_serde(data: &[u8]) -> Option<Option<Choice<'_>>> {
    serde_json::from_slice::<Top<'_>>(data)
        .ok()
        .map(|t| t.choice.map(|c| c.0))
}

/// The chunk: an object whose `choices` is read.
struct Top<'a> {
    choice: Option<ChoiceVal<'a>>,
}

/// A visitor that turns every JSON value other than the expected kind into
/// `T::default()`, reading (and so checking) it through [`Skip`].
macro_rules! other_kinds_are_default {
    () => {
        fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

macro_rules! strings_are_default {
    () => {
        fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> {
            Ok(Default::default())
        }
    };
}

macro_rules! seqs_are_default {
    () => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<Skip>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

macro_rules! maps_are_default {
    () => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<Skip, Skip>()?.is_some() {}
            Ok(Default::default())
        }
    };
}

/// Any JSON value, read in full and dropped. Through `deserialize_any`,
/// not `deserialize_ignored_any`: serde_json skips the latter's numbers
/// without converting them and nests it without its depth limit, and a
/// `Value` would refuse both.
#[derive(Default)]
struct Skip;

impl<'de> Deserialize<'de> for Skip {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Skip;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            other_kinds_are_default!();
            strings_are_default!();
            seqs_are_default!();
            maps_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// A string field (`None` for any other value), borrowed when it has no
/// escapes.
#[derive(Default)]
struct Str<'a>(Option<Cow<'a, str>>);

impl<'de> Deserialize<'de> for Str<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Str<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Str(Some(Cow::Owned(s.to_string()))))
            }
            other_kinds_are_default!();
            seqs_are_default!();
            maps_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// `tool_calls`: true for a non-empty array.
#[derive(Default)]
struct NonEmptyArray(bool);

impl<'de> Deserialize<'de> for NonEmptyArray {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = NonEmptyArray;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let any = seq.next_element::<Skip>()?.is_some();
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(NonEmptyArray(any))
            }
            other_kinds_are_default!();
            strings_are_default!();
            maps_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// The keys this reader looks at, matched without allocating.
enum Key {
    Choices,
    /// `error` or `usage`: the chunk goes to the full parse.
    Rare,
    FinishReason,
    Delta,
    Message,
    Text,
    Content,
    ReasoningContent,
    Reasoning,
    ToolCalls,
    Other,
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = Key;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an object key")
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Key, E> {
                Ok(match s {
                    "choices" => Key::Choices,
                    "error" | "usage" => Key::Rare,
                    "finish_reason" => Key::FinishReason,
                    "delta" => Key::Delta,
                    "message" => Key::Message,
                    "text" => Key::Text,
                    "content" => Key::Content,
                    "reasoning_content" => Key::ReasoningContent,
                    "reasoning" => Key::Reasoning,
                    "tool_calls" => Key::ToolCalls,
                    _ => Key::Other,
                })
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Top<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Top<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut choice = None;
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Choices => choice = map.next_value::<First<'de>>()?.0,
                        Key::Rare => return Err(de::Error::custom("for the full parse")),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(Top { choice })
            }
        }
        // Only an object: serde would read a struct from an array too.
        d.deserialize_map(V)
    }
}

/// `choices`: its first element, when it is a non-empty array.
#[derive(Default)]
struct First<'a>(Option<ChoiceVal<'a>>);

impl<'de> Deserialize<'de> for First<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = First<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
                let first = seq.next_element::<ChoiceVal<'de>>()?;
                while seq.next_element::<Skip>()?.is_some() {}
                Ok(First(first))
            }
            other_kinds_are_default!();
            strings_are_default!();
            maps_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// A choice (any value: one that is not an object has no fields).
#[derive(Default)]
struct ChoiceVal<'a>(Choice<'a>);

/// A `delta` or `message` (fields of a value that is not an object: none).
#[derive(Default)]
struct Fields<'a> {
    content: Option<Cow<'a, str>>,
    reasoning_content: Option<Cow<'a, str>>,
    reasoning: Option<Cow<'a, str>>,
    tool_calls: bool,
}

impl<'de> Deserialize<'de> for ChoiceVal<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = ChoiceVal<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut c = Choice::default();
                let (mut delta, mut message) = (None, None);
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::FinishReason => c.finish_reason = map.next_value::<Str<'de>>()?.0,
                        Key::Text => c.text = map.next_value::<Str<'de>>()?.0,
                        Key::Delta => delta = Some(map.next_value::<Fields<'de>>()?),
                        Key::Message => message = Some(map.next_value::<Fields<'de>>()?),
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                // Chat's delta, or a whole message when there is no delta.
                if let Some(f) = delta.or(message) {
                    c.content = f.content;
                    c.reasoning_content = f.reasoning_content;
                    c.reasoning = f.reasoning;
                    c.tool_calls = f.tool_calls;
                }
                Ok(ChoiceVal(c))
            }
            other_kinds_are_default!();
            strings_are_default!();
            seqs_are_default!();
        }
        d.deserialize_any(V)
    }
}

impl<'de> Deserialize<'de> for Fields<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Fields<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
                let mut f = Fields::default();
                while let Some(key) = map.next_key::<Key>()? {
                    match key {
                        Key::Content => f.content = map.next_value::<Str<'de>>()?.0,
                        Key::ReasoningContent => {
                            f.reasoning_content = map.next_value::<Str<'de>>()?.0
                        }
                        Key::Reasoning => f.reasoning = map.next_value::<Str<'de>>()?.0,
                        Key::ToolCalls => f.tool_calls = map.next_value::<NonEmptyArray>()?.0,
                        _ => {
                            map.next_value::<Skip>()?;
                        }
                    }
                }
                Ok(f)
            }
            other_kinds_are_default!();
            strings_are_default!();
            seqs_are_default!();
        }
        d.deserialize_any(V)
    }
}

/// Chunks made of the keys the readers look for, at every level, with
/// values of every kind: the property tests' input (`scan`'s and `sse`'s).
#[cfg(test)]
pub(crate) fn arb_chunk() -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    let key = prop::sample::select(vec![
        "choices",
        "delta",
        "message",
        "content",
        "text",
        "finish_reason",
        "tool_calls",
        "reasoning",
        "reasoning_content",
        "index",
        "usage",
        "id",
        "error",
        "x",
    ]);
    let leaf = prop_oneof![
        Just(serde_json::Value::Null),
        any::<bool>().prop_map(serde_json::Value::from),
        any::<i32>().prop_map(serde_json::Value::from),
        (-1e3f64..1e3).prop_map(serde_json::Value::from),
        "[ -~\n\"\\\\é]{0,6}".prop_map(serde_json::Value::from),
    ];
    leaf.prop_recursive(5, 40, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(serde_json::Value::from),
            prop::collection::vec((key.clone(), inner), 0..4).prop_map(|kv| {
                serde_json::Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}
