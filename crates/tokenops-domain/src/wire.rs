//! Closed vocabularies of wire strings: the one declaration of an enum whose values travel as
//! fixed texts (statuses, types, reasons), so that every such enum parses and prints alike.

/// Declares an enum with `ALL` (declaration order, which also orders the values), `as_str`,
/// `parse` (exact and case-sensitive, as the API's enums are) and `Display`, serialised and
/// documented in OpenAPI as its wire string.
macro_rules! wire_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident => $text:tt),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(
            Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize, utoipa::ToSchema,
        )]
        pub enum $name {
            $($(#[$vmeta])* #[serde(rename = $text)] $variant),+
        }

        impl $name {
            pub const ALL: [$name; [$($text),+].len()] = [$($name::$variant),+];

            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text),+
                }
            }

            pub fn parse(text: &str) -> Option<$name> {
                Self::ALL.into_iter().find(|v| v.as_str() == text)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}
pub(crate) use wire_enum;

#[cfg(test)]
mod tests {
    wire_enum! {
        /// Two words per value, so that a schema or serde that fell back to the variant names
        /// would show.
        Sample {
            FirstValue => "FIRST_VALUE",
            SecondValue => "second.value",
        }
    }

    #[test]
    fn each_value_parses_prints_and_serialises_as_its_wire_string() {
        for value in Sample::ALL {
            assert_eq!(Sample::parse(value.as_str()), Some(value));
            assert_eq!(value.to_string(), value.as_str());
            assert_eq!(serde_json::to_value(value).ok(), Some(serde_json::json!(value.as_str())));
        }
        assert_eq!(Sample::parse("first_value"), None);
        assert!(Sample::FirstValue < Sample::SecondValue);
    }

    #[test]
    fn the_openapi_schema_lists_the_wire_strings() {
        // A `literal` fragment reaches utoipa wrapped in an invisible group it does not read, and
        // it then listed the variant names; `tt` passes the string through bare.
        let schema = serde_json::to_value(<Sample as utoipa::PartialSchema>::schema()).unwrap_or_default();
        assert_eq!(schema["enum"], serde_json::json!(["FIRST_VALUE", "second.value"]));
    }
}
