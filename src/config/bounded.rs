//! Whole numbers with a range, for every numeric setting of the config: a value of the
//! wrong type or out of range is a deserialization error, so it carries the key path, the
//! line and column, and says what is accepted (`expected an integer from 0 to 1000`)
//! instead of a Rust type name (`expected i64`).

use serde::Deserialize;
use serde::de::{self, Deserializer, Unexpected, Visitor};
use std::fmt;

/// An integer in `LO..=HI`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Bounded<const LO: u64, const HI: u64>(pub(super) u64);

impl<'de, const LO: u64, const HI: u64> Deserialize<'de> for Bounded<LO, HI> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<const LO: u64, const HI: u64>;
        impl<const LO: u64, const HI: u64> Visitor<'_> for V<LO, HI> {
            type Value = Bounded<LO, HI>;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                write!(f, "an integer from {LO} to {HI}")
            }
            fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
                if (LO..=HI).contains(&v) {
                    Ok(Bounded(v))
                } else {
                    Err(E::invalid_value(Unexpected::Unsigned(v), &self))
                }
            }
            fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
                match u64::try_from(v) {
                    Ok(u) => self.visit_u64(u),
                    Err(_) => Err(E::invalid_value(Unexpected::Signed(v), &self)),
                }
            }
        }
        d.deserialize_any(V::<LO, HI>)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wrong_types_and_ranges_say_what_is_accepted() {
        let ok: Bounded<0, 1000> = serde_yaml::from_str("7").unwrap();
        assert_eq!(ok.0, 7);
        for (text, says) in [
            ("three", "invalid type: string \"three\""),
            ("1001", "invalid value: integer `1001`"),
            ("-1", "invalid value: integer `-1`"),
            ("2.5", "invalid type: floating point `2.5`"),
            ("[1]", "invalid type: sequence"),
        ] {
            let e = serde_yaml::from_str::<Bounded<0, 1000>>(text)
                .unwrap_err()
                .to_string();
            assert!(e.contains(says), "{text}: {e}");
            assert!(
                e.contains("expected an integer from 0 to 1000"),
                "{text}: {e}"
            );
        }
    }
}
