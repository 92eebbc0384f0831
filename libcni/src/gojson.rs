//! JSON decoding with the leniency of Go's `encoding/json`, which is what the reference plugins,
//! libcni and every Go runtime use. A runtime's JSON is law: what Go accepts, we accept.
//!
//! What Go does and serde does not:
//! - **Object keys match struct fields case-insensitively** when no field has the exact name
//!   (containerd sends `runtimeConfig.portMappings` as `[{"HostPort": 80, ...}]` and
//!   `runtimeConfig.bandwidth` as `{"IngressRate": ...}`: go-cni's structs carry no JSON tags).
//!   The exact name is tried first, then Unicode simple case folding, as Go does. Matching
//!   is per field: a key naming a field exactly wins over any key that only folds to it, so
//!   where Go's struct has two fields whose names differ only in case (static IPAM's
//!   `address` and `Address`, both in what Go marshals) and ours models one, that one gets
//!   its own key, not its twin's.
//! - **Duplicate keys: the last one wins** (serde refuses `duplicate field`); among keys that
//!   only fold to a field, the last one too.
//! - **`null` is "no value"**: a `null` struct field leaves the field at its default, and `null`
//!   where a string, number, bool, list or map is expected decodes to that type's zero value.
//! - **Unknown keys are ignored** (no struct here uses `deny_unknown_fields`).
//!
//! Use [`from_value`]/[`from_map`]/[`from_slice`] instead of `serde_json::from_*` for anything a
//! runtime or another plugin wrote, [`get`] for single-key lookups in a raw object, and
//! [`parse`] to read bytes into a [`Value`] (duplicate keys resolved the same way).

use serde::de::value::BorrowedStrDeserializer;
use serde::de::{
    self, DeserializeOwned, DeserializeSeed, EnumAccess, MapAccess, SeqAccess, VariantAccess,
    Visitor,
};
use serde::Deserialize;
use serde_json::{Map, Number, Value};
use std::collections::HashMap;

pub use serde_json::Error;

/// Decodes `T` from a JSON value with Go's rules (module docs).
pub fn from_value<'de, T: Deserialize<'de>>(value: &'de Value) -> Result<T, Error> {
    T::deserialize(GoDeserializer(value))
}

/// [`from_value`] for an object held as a map (a plugin's request config).
pub fn from_map<T: DeserializeOwned>(map: &Map<String, Value>) -> Result<T, Error> {
    let fields: Vec<(&str, &Value)> = map.iter().map(|(k, v)| (k.as_str(), v)).collect();
    T::deserialize(ObjectDeserializer(fields))
}

/// Decodes `T` from JSON bytes with Go's rules.
pub fn from_slice<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Error> {
    let value = parse(bytes)?;
    from_value(&value)
}

/// Parses JSON bytes into a [`Value`]. A key that appears more than once keeps its last value,
/// placed where it last appeared, so case-folded duplicates resolve in document order.
pub fn parse(bytes: &[u8]) -> Result<Value, Error> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = LastWins.deserialize(&mut de)?;
    de.end()?;
    Ok(value)
}

/// The value Go would decode into a struct field named `field` of the object `obj`: the last
/// non-null entry whose key is `field`, or when there is none, the last one equal to it under
/// case folding (matching per field, as in [`from_value`]).
pub fn get<'a>(obj: &'a Map<String, Value>, field: &str) -> Option<&'a Value> {
    let last = |matches: &dyn Fn(&str) -> bool| {
        obj.iter()
            .rev()
            .find(|(k, v)| !v.is_null() && matches(k))
            .map(|(_, v)| v)
    };
    last(&|k| k == field).or_else(|| last(&|k| fold_eq(k, field)))
}

/// [`get`] on a value that may not be an object.
pub fn get_in<'a>(value: &'a Value, field: &str) -> Option<&'a Value> {
    value.as_object().and_then(|o| get(o, field))
}

/// Go's key comparison: equal under Unicode simple case folding (`HostPort` = `hostport`,
/// and, as in Go, `ſ` = `s` and the Kelvin sign = `k`).
pub fn fold_eq(a: &str, b: &str) -> bool {
    if a.is_ascii() && b.is_ascii() {
        return a.eq_ignore_ascii_case(b);
    }
    let mut x = a.chars().map(fold_char);
    let mut y = b.chars().map(fold_char);
    loop {
        match (x.next(), y.next()) {
            (None, None) => return true,
            (Some(p), Some(q)) if p == q => continue,
            _ => return false,
        }
    }
}

/// One representative of a character's simple case-folding orbit.
fn fold_char(c: char) -> char {
    fn single(mut it: impl Iterator<Item = char>) -> Option<char> {
        let first = it.next()?;
        it.next().is_none().then_some(first)
    }
    let lower = single(c.to_lowercase()).unwrap_or(c);
    let upper = single(lower.to_uppercase()).unwrap_or(lower);
    single(upper.to_lowercase()).unwrap_or(upper)
}

/// Builds a [`Value`] where a repeated key keeps its last value at its last position.
struct LastWins;

impl<'de> DeserializeSeed<'de> for LastWins {
    type Value = Value;
    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for LastWins {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_bool<E>(self, b: bool) -> Result<Value, E> {
        Ok(Value::Bool(b))
    }
    fn visit_i64<E>(self, n: i64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_u64<E>(self, n: u64) -> Result<Value, E> {
        Ok(Value::Number(n.into()))
    }
    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Value, E> {
        Number::from_f64(n)
            .map(Value::Number)
            .ok_or_else(|| E::custom(format!("number {n} is not finite")))
    }
    fn visit_str<E>(self, s: &str) -> Result<Value, E> {
        Ok(Value::String(s.to_string()))
    }
    fn visit_string<E>(self, s: String) -> Result<Value, E> {
        Ok(Value::String(s))
    }
    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_some<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(LastWins)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let value = map.next_value_seed(LastWins)?;
            out.shift_remove(&key);
            out.insert(key, value);
        }
        Ok(Value::Object(out))
    }
}

/// A serde deserializer over a borrowed [`Value`] with Go's decoding rules.
#[derive(Clone, Copy)]
struct GoDeserializer<'de>(&'de Value);

fn visit_number<'de, V: Visitor<'de>>(n: &Number, visitor: V) -> Result<V::Value, Error> {
    if let Some(u) = n.as_u64() {
        visitor.visit_u64(u)
    } else if let Some(i) = n.as_i64() {
        visitor.visit_i64(i)
    } else {
        visitor.visit_f64(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// Entries of an object decoded into a struct with `fields`: keys mapped onto field names,
/// nulls dropped (the field keeps its default), keys of no field left out (they would be
/// ignored anyway). Matching is per field: a field takes the last key that names it exactly,
/// and only when no key does, the last key equal to it under case folding. A Go struct may
/// hold fields whose names differ only in case (static IPAM's `address` string beside its
/// untagged `Address` IPNet, which Go marshals as an object); a Rust struct that models only
/// one of them must not receive the other's value.
fn struct_entries<'de>(
    entries: impl Iterator<Item = (&'de str, &'de Value)>,
    fields: &'static [&'static str],
) -> Vec<(&'de str, &'de Value)> {
    // Per field: the position of its chosen entry in `out`, and whether that key was exact.
    let mut out: Vec<Option<(&'de str, &'de Value)>> = Vec::new();
    let mut slot: HashMap<&'static str, (usize, bool)> = HashMap::new();
    for (key, value) in entries {
        if value.is_null() {
            continue;
        }
        let (field, exact) = match fields.iter().copied().find(|f| *f == key) {
            Some(f) => (f, true),
            None => match fields.iter().copied().find(|f| fold_eq(key, f)) {
                Some(f) => (f, false),
                None => continue,
            },
        };
        match slot.get(field) {
            // An exact key already holds this field: a folded one does not displace it.
            Some(&(_, true)) if !exact => continue,
            Some(&(previous, _)) => out[previous] = None,
            None => {}
        }
        slot.insert(field, (out.len(), exact));
        out.push(Some((field, value)));
    }
    out.into_iter().flatten().collect()
}

/// An object (as key/value pairs) in the position of a struct or a map.
struct ObjectDeserializer<'de>(Vec<(&'de str, &'de Value)>);

impl<'de> de::Deserializer<'de> for ObjectDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_map(Entries::new(self.0))
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_map(Entries::new(struct_entries(self.0.into_iter(), fields)).of_struct(name))
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_some(self)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    serde::forward_to_deserialize_any! {
        bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf
        unit unit_struct seq tuple tuple_struct map enum identifier ignored_any
    }
}

/// Key/value pairs handed to a visitor.
struct Entries<'de> {
    iter: std::vec::IntoIter<(&'de str, &'de Value)>,
    value: Option<&'de Value>,
    /// The struct being decoded (serde's container name) and the field whose value comes
    /// next, for Go's wording of a type error; no struct for a map.
    in_struct: Option<&'static str>,
    key: &'de str,
}

impl<'de> Entries<'de> {
    fn new(entries: Vec<(&'de str, &'de Value)>) -> Self {
        Entries {
            iter: entries.into_iter(),
            value: None,
            in_struct: None,
            key: "",
        }
    }

    fn of_struct(mut self, name: &'static str) -> Self {
        self.in_struct = Some(name);
        self
    }
}

impl<'de> MapAccess<'de> for Entries<'de> {
    type Error = Error;

    fn next_key_seed<K: DeserializeSeed<'de>>(
        &mut self,
        seed: K,
    ) -> Result<Option<K::Value>, Error> {
        match self.iter.next() {
            Some((key, value)) => {
                self.value = Some(value);
                self.key = key;
                seed.deserialize(BorrowedStrDeserializer::new(key))
                    .map(Some)
            }
            None => Ok(None),
        }
    }

    fn next_value_seed<S: DeserializeSeed<'de>>(&mut self, seed: S) -> Result<S::Value, Error> {
        let value = self
            .value
            .take()
            .ok_or_else(|| <Error as de::Error>::custom("map value requested before its key"))?;
        let decoded = seed.deserialize(GoDeserializer(value));
        match self.in_struct {
            Some(name) => decoded.map_err(|e| go_field_error(e, name, self.key, value)),
            None => decoded,
        }
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.iter.len())
    }
}

struct Elements<'de>(std::slice::Iter<'de, Value>);

impl<'de> SeqAccess<'de> for Elements<'de> {
    type Error = Error;

    fn next_element_seed<S: DeserializeSeed<'de>>(
        &mut self,
        seed: S,
    ) -> Result<Option<S::Value>, Error> {
        self.0
            .next()
            .map(|v| seed.deserialize(GoDeserializer(v)))
            .transpose()
    }

    fn size_hint(&self) -> Option<usize> {
        Some(self.0.len())
    }
}

fn object_entries(obj: &Map<String, Value>) -> impl Iterator<Item = (&str, &Value)> {
    obj.iter().map(|(k, v)| (k.as_str(), v))
}

/// Go decodes `null` into any non-pointer type as that type's zero value.
macro_rules! null_is_zero {
    ($($method:ident => $visit:ident($zero:expr)),* $(,)?) => {
        $(
            fn $method<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
                match self.0 {
                    Value::Null => visitor.$visit($zero),
                    _ => self.deserialize_any(visitor),
                }
            }
        )*
    };
}

impl<'de> de::Deserializer<'de> for GoDeserializer<'de> {
    type Error = Error;

    fn deserialize_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_unit(),
            Value::Bool(b) => visitor.visit_bool(*b),
            Value::Number(n) => visit_number(n, visitor),
            Value::String(s) => visitor.visit_borrowed_str(s),
            Value::Array(a) => visitor.visit_seq(Elements(a.iter())),
            Value::Object(o) => visitor.visit_map(Entries::new(object_entries(o).collect())),
        }
    }

    null_is_zero! {
        deserialize_bool => visit_bool(false),
        deserialize_i8 => visit_i64(0),
        deserialize_i16 => visit_i64(0),
        deserialize_i32 => visit_i64(0),
        deserialize_i64 => visit_i64(0),
        deserialize_i128 => visit_i64(0),
        deserialize_u8 => visit_u64(0),
        deserialize_u16 => visit_u64(0),
        deserialize_u32 => visit_u64(0),
        deserialize_u64 => visit_u64(0),
        deserialize_u128 => visit_u64(0),
        deserialize_f32 => visit_f64(0.0),
        deserialize_f64 => visit_f64(0.0),
        deserialize_str => visit_borrowed_str(""),
        deserialize_string => visit_borrowed_str(""),
    }

    fn deserialize_char<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_bytes<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_byte_buf<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_option<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_none(),
            _ => visitor.visit_some(self),
        }
    }

    fn deserialize_unit<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_unit_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_newtype_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        visitor: V,
    ) -> Result<V::Value, Error> {
        visitor.visit_newtype_struct(self)
    }

    fn deserialize_seq<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_seq(Elements([].iter())),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_tuple<V: Visitor<'de>>(
        self,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_tuple_struct<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _len: usize,
        visitor: V,
    ) -> Result<V::Value, Error> {
        self.deserialize_seq(visitor)
    }

    fn deserialize_map<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        match self.0 {
            Value::Null => visitor.visit_map(Entries::new(Vec::new())),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_struct<V: Visitor<'de>>(
        self,
        name: &'static str,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::Object(o) => ObjectDeserializer(object_entries(o).collect())
                .deserialize_struct(name, fields, visitor),
            Value::Null => visitor.visit_map(Entries::new(Vec::new())),
            _ => self.deserialize_any(visitor),
        }
    }

    fn deserialize_enum<V: Visitor<'de>>(
        self,
        _name: &'static str,
        _variants: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        match self.0 {
            Value::String(s) => visitor.visit_enum(BorrowedStrDeserializer::<Error>::new(s)),
            Value::Object(o) if o.len() == 1 => match o.iter().next() {
                Some((variant, value)) => visitor.visit_enum(Variant { variant, value }),
                None => self.deserialize_any(visitor),
            },
            _ => Err(de::Error::invalid_type(
                unexpected(self.0),
                &"a string or a one-key object",
            )),
        }
    }

    fn deserialize_identifier<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        self.deserialize_any(visitor)
    }

    fn deserialize_ignored_any<V: Visitor<'de>>(self, visitor: V) -> Result<V::Value, Error> {
        visitor.visit_unit()
    }
}

/// A type error met while decoding struct `name`'s field `field` from `value`, in the words of
/// Go's `encoding/json` (`json: cannot unmarshal string into Go struct field NetConf.mtu of
/// type int`), which the reference plugins print and tools match on. Go names the innermost
/// struct and the whole path of fields from the top, so an error already worded by an inner
/// struct gets `field` inserted into its path. Errors of other kinds, or of Rust types with no
/// obvious Go counterpart, are left as they are.
fn go_field_error(e: Error, name: &str, field: &str, value: &Value) -> Error {
    const WORDED: &str = "json: cannot unmarshal ";
    const FIELD: &str = " into Go struct field ";
    let msg = e.to_string();
    if msg.starts_with(WORDED) {
        let Some(at) = msg.find(FIELD).map(|i| i + FIELD.len()) else {
            return e;
        };
        // `Inner.path` becomes `Inner.field.path`.
        let Some(dot) = msg[at..].find('.').map(|i| at + i + 1) else {
            return e;
        };
        return <Error as de::Error>::custom(format!("{}{field}.{}", &msg[..dot], &msg[dot..]));
    }
    let rust_type = ["invalid type: ", "invalid value: "]
        .iter()
        .any(|p| msg.starts_with(p))
        .then(|| msg.rsplit_once(", expected ").map(|(_, t)| t))
        .flatten();
    let Some(go_type) = rust_type.and_then(go_type_name) else {
        return e;
    };
    let numeric = !matches!(go_type, "bool" | "string") && !go_type.contains('.');
    let kind = match value {
        Value::Number(n) if numeric => format!("number {n}"),
        Value::Number(_) => "number".to_string(),
        Value::String(_) => "string".to_string(),
        Value::Bool(_) => "bool".to_string(),
        Value::Array(_) => "array".to_string(),
        Value::Object(_) => "object".to_string(),
        Value::Null => return e,
    };
    <Error as de::Error>::custom(format!(
        "{WORDED}{kind}{FIELD}{name}.{field} of type {go_type}"
    ))
}

/// The Go type a field of serde's expected type `rust` stands for (`i64` is Go's `int`). Of
/// structs (serde names them by their Rust name) only the CNI library's `ipam` and `dns`
/// objects are known.
fn go_type_name(rust: &str) -> Option<&'static str> {
    Some(match rust {
        "struct IpamRef" | "struct RawIpam" => "types.IPAM",
        "struct Dns" => "types.DNS",
        "i64" => "int",
        "i32" => "int32",
        "i16" => "int16",
        "i8" => "int8",
        "u64" => "uint64",
        "u32" => "uint32",
        "u16" => "uint16",
        "u8" => "uint8",
        "f64" => "float64",
        "f32" => "float32",
        "a boolean" => "bool",
        "a string" => "string",
        _ => return None,
    })
}

fn unexpected(v: &Value) -> de::Unexpected<'_> {
    match v {
        Value::Null => de::Unexpected::Unit,
        Value::Bool(b) => de::Unexpected::Bool(*b),
        Value::Number(n) => match (n.as_u64(), n.as_i64()) {
            (Some(u), _) => de::Unexpected::Unsigned(u),
            (None, Some(i)) => de::Unexpected::Signed(i),
            _ => de::Unexpected::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => de::Unexpected::Str(s),
        Value::Array(_) => de::Unexpected::Seq,
        Value::Object(_) => de::Unexpected::Map,
    }
}

/// An externally tagged enum value `{"Variant": value}`.
struct Variant<'de> {
    variant: &'de str,
    value: &'de Value,
}

impl<'de> EnumAccess<'de> for Variant<'de> {
    type Error = Error;
    type Variant = GoDeserializer<'de>;

    fn variant_seed<S: DeserializeSeed<'de>>(
        self,
        seed: S,
    ) -> Result<(S::Value, Self::Variant), Error> {
        let tag = seed.deserialize(BorrowedStrDeserializer::new(self.variant))?;
        Ok((tag, GoDeserializer(self.value)))
    }
}

impl<'de> VariantAccess<'de> for GoDeserializer<'de> {
    type Error = Error;

    fn unit_variant(self) -> Result<(), Error> {
        Ok(())
    }

    fn newtype_variant_seed<S: DeserializeSeed<'de>>(self, seed: S) -> Result<S::Value, Error> {
        seed.deserialize(self)
    }

    fn tuple_variant<V: Visitor<'de>>(self, _len: usize, visitor: V) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_seq(self, visitor)
    }

    fn struct_variant<V: Visitor<'de>>(
        self,
        fields: &'static [&'static str],
        visitor: V,
    ) -> Result<V::Value, Error> {
        de::Deserializer::deserialize_struct(self, "", fields, visitor)
    }
}

#[cfg(test)]
mod tests;
