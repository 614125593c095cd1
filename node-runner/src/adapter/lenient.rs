//! Provider JSON read straight from its bytes into the few fields an
//! adapter uses: no `serde_json::Value` tree per chunk or line.
//!
//! Every event of a normalized run goes through here, so this is the
//! Node's hot path on that route. Text is borrowed from the input (owned
//! only when it has JSON escapes), unknown fields are skipped without
//! building anything, and a field reads exactly what a `Value` walk read:
//! a value of an unexpected type counts as absent, numbers are counts only
//! when they are non-negative integers, and the last of duplicate keys
//! wins. An adapter describes its object with [`FromMap`].

use std::borrow::Cow;
use std::fmt;
use std::marker::PhantomData;

use serde::de::{self, Deserialize, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

/// Implements the `Visitor` methods of every JSON value that is not the
/// expected kind: consumed and read as `Default`.
macro_rules! ignore_others {
    ($($skip:ident),*) => {
        $(ignore_others!(@one $skip);)*
    };
    (@one bool) => { fn visit_bool<E: de::Error>(self, _: bool) -> Result<Self::Value, E> { Ok(Default::default()) } };
    (@one i64) => { fn visit_i64<E: de::Error>(self, _: i64) -> Result<Self::Value, E> { Ok(Default::default()) } };
    (@one u64) => { fn visit_u64<E: de::Error>(self, _: u64) -> Result<Self::Value, E> { Ok(Default::default()) } };
    (@one f64) => { fn visit_f64<E: de::Error>(self, _: f64) -> Result<Self::Value, E> { Ok(Default::default()) } };
    (@one str) => { fn visit_str<E: de::Error>(self, _: &str) -> Result<Self::Value, E> { Ok(Default::default()) } };
    (@one unit) => {
        fn visit_unit<E: de::Error>(self) -> Result<Self::Value, E> { Ok(Default::default()) }
        fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> { Ok(Default::default()) }
    };
    (@one seq) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
    (@one map) => {
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok(Default::default())
        }
    };
}
pub(crate) use ignore_others;

/// An object read field by field from a map.
pub(crate) trait FromMap<'de>: Default {
    /// Handles the value of `key` (the value must be consumed).
    fn field<A: MapAccess<'de>>(&mut self, key: &str, map: &mut A) -> Result<(), A::Error>;
}

/// Reads a map into `T`: every key is offered to `T::field`.
pub(crate) fn read_map<'de, T: FromMap<'de>, A: MapAccess<'de>>(mut map: A) -> Result<T, A::Error> {
    let mut out = T::default();
    while let Some(key) = map.next_key::<Key<'de>>()? {
        out.field(&key.0, &mut map)?;
    }
    Ok(out)
}

/// Reads the value of the current key into `slot` as [`Text`], or skips it
/// when the key has no slot (an object of text fields, in one match).
pub(crate) fn read_text<'de, A: MapAccess<'de>>(
    map: &mut A,
    slot: Option<&mut Option<Cow<'de, str>>>,
) -> Result<(), A::Error> {
    match slot {
        Some(slot) => *slot = map.next_value::<Text<'de>>()?.0,
        None => {
            map.next_value::<IgnoredAny>()?;
        }
    }
    Ok(())
}

/// A map key, borrowed when it has no escapes.
struct Key<'de>(Cow<'de, str>);

impl<'de> Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(Key(Text::deserialize(d)?.0.unwrap_or_default()))
    }
}

/// A string, or `None` for any other value.
#[derive(Default)]
pub(crate) struct Text<'de>(pub(crate) Option<Cow<'de, str>>);

impl<'de> Deserialize<'de> for Text<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Text<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_borrowed_str<E: de::Error>(self, s: &'de str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Borrowed(s))))
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(s.to_owned()))))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Self::Value, E> {
                Ok(Text(Some(Cow::Owned(s))))
            }
            ignore_others!(bool, i64, u64, f64, unit, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// A count: a non-negative integer, or `None` for any other value (what
/// `Value::as_u64` accepts).
#[derive(Default)]
pub(crate) struct Count(pub(crate) Option<u64>);

impl<'de> Deserialize<'de> for Count {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Count;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_u64<E: de::Error>(self, n: u64) -> Result<Self::Value, E> {
                Ok(Count(Some(n)))
            }
            ignore_others!(bool, i64, f64, str, unit, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// A boolean, or `None` for any other value (what `Value::as_bool`
/// accepts).
#[derive(Default)]
pub(crate) struct Flag(pub(crate) Option<bool>);

impl<'de> Deserialize<'de> for Flag {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl<'de> Visitor<'de> for V {
            type Value = Flag;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_bool<E: de::Error>(self, b: bool) -> Result<Self::Value, E> {
                Ok(Flag(Some(b)))
            }
            ignore_others!(i64, u64, f64, str, unit, seq, map);
        }
        d.deserialize_any(V)
    }
}

/// An object read as `T`, or `None` for any other value.
pub(crate) struct Lenient<T>(pub(crate) Option<T>);

impl<T> Default for Lenient<T> {
    fn default() -> Self {
        Self(None)
    }
}

impl<'de, T: FromMap<'de>> Deserialize<'de> for Lenient<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: FromMap<'de>> Visitor<'de> for V<T> {
            type Value = Lenient<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Ok(Lenient(Some(read_map(map)?)))
            }
            ignore_others!(bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// A whole JSON document: an object read as `T`, or some other value.
#[derive(Debug, Default)]
pub(crate) enum JsonObject<T> {
    /// A JSON object.
    Object(T),
    /// Valid JSON that is not an object.
    #[default]
    NotObject,
}

impl<'de, T: FromMap<'de>> Deserialize<'de> for JsonObject<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: FromMap<'de>> Visitor<'de> for V<T> {
            type Value = JsonObject<T>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("any JSON value")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Self::Value, A::Error> {
                Ok(JsonObject::Object(read_map(map)?))
            }
            ignore_others!(bool, i64, u64, f64, str, unit, seq);
        }
        d.deserialize_any(V(PhantomData))
    }
}

/// JSON values for tests: objects and arrays nested from leaves of every
/// kind, with keys drawn from `keys` (those an adapter looks at).
#[cfg(test)]
pub(crate) fn json_value(
    keys: Vec<&'static str>,
) -> impl proptest::strategy::Strategy<Value = serde_json::Value> {
    use proptest::prelude::*;
    use serde_json::{Map, Value, json};
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(|n| json!(n)),
        any::<u64>().prop_map(|n| json!(n)),
        (-1e6f64..1e6).prop_map(|f| json!(f)),
        prop::sample::select(vec!["", "tok ", "hmm", "stop", "a\"b\\c\n\u{e9}"])
            .prop_map(|s| Value::String(s.into())),
    ];
    let keys = prop::sample::select(keys);
    leaf.prop_recursive(5, 64, 4, move |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..3).prop_map(Value::Array),
            prop::collection::vec((keys.clone(), inner), 0..5).prop_map(|entries| {
                Value::Object(
                    entries
                        .into_iter()
                        .map(|(k, v)| (k.to_owned(), v))
                        .collect::<Map<String, Value>>(),
                )
            }),
        ]
    })
}
