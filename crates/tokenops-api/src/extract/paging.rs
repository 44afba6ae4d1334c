//! Paging, one implementation for the spec's four styles:
//!
//! | style | request            | envelope                                        |
//! |-------|--------------------|-------------------------------------------------|
//! | A     | page, size         | content, page, size, totalElements, totalPages  |
//! | B     | page, size         | data, page, size, totalItems, totalPages        |
//! | C     | page, size, sort   | items, pageNumber, pageSize, totalResults       |
//! | D     | limit, cursor      | items, nextCursor (null on the last page), limit |
//!
//! Sizes follow a per-endpoint [`SizeRule`] (reject or clamp outside the bounds). Sorts are
//! `property` or `property,asc|desc`, repeatable, checked against the endpoint's allow list.
//! Cursors are opaque and tamper-proof: an HMAC-SHA256 over the position and its binding (the
//! endpoint, the organisation and a hash of the filters), so an edited cursor, one from another
//! endpoint or organisation, or one reused with other filters is refused with 400.

use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use hmac::{Hmac, Mac};
use serde::ser::SerializeStruct;
use serde::{Serialize, Serializer};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tokenops_app::{Code, Error};
use tokenops_domain::TenantId;
use tokenops_domain::paging::{KeysetPosition, KeysetRequest, Page, PageRequest, SortDirection, SortKey};
use uuid::Uuid;

use std::marker::PhantomData;

use super::params::QueryParams;
use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    A,
    B,
    C,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutOfBounds {
    /// 400 naming the bounds.
    Reject,
    /// Brought to the nearest bound.
    Clamp,
}

#[derive(Debug, Clone, Copy)]
pub struct SizeRule {
    pub default: u32,
    pub max: u32,
    pub above_max: OutOfBounds,
    pub below_one: OutOfBounds,
}

/// customers, accounts, contracts, transactions, breaks, webhooks, webhook events.
pub const STRICT_SIZE: SizeRule =
    SizeRule { default: 20, max: 100, above_max: OutOfBounds::Reject, below_one: OutOfBounds::Reject };
/// audit events: above 100 reduced to 100.
pub const AUDIT_SIZE: SizeRule =
    SizeRule { default: 20, max: 100, above_max: OutOfBounds::Clamp, below_one: OutOfBounds::Reject };
/// automations and history: above 100 returns 100, below 1 returns 1.
pub const CLAMPED_SIZE: SizeRule =
    SizeRule { default: 20, max: 100, above_max: OutOfBounds::Clamp, below_one: OutOfBounds::Clamp };

fn parse_int(name: &str, text: &str) -> Result<i64, Error> {
    text.trim().parse::<i64>().map_err(|_| Error::invalid_field(name, "must be an integer"))
}

/// Like `parse_int`, but a whole number past the 64-bit range reads as the nearest end of it:
/// where sizes are clamped, `size=99999999999999999999` is above 100 like any other.
fn parse_saturating(name: &str, text: &str) -> Result<i64, Error> {
    use std::num::IntErrorKind;
    match text.trim().parse::<i64>() {
        Ok(n) => Ok(n),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => Ok(i64::MAX),
        Err(e) if *e.kind() == IntErrorKind::NegOverflow => Ok(i64::MIN),
        Err(_) => Err(Error::invalid_field(name, "must be an integer")),
    }
}

fn bounded_size(name: &str, value: Option<&str>, rule: SizeRule) -> Result<u32, Error> {
    let Some(text) = value else { return Ok(rule.default) };
    let size = parse_saturating(name, text)?;
    let refuse = || Error::invalid_field(name, format!("must be between 1 and {}", rule.max));
    if size < 1 {
        return match rule.below_one {
            OutOfBounds::Reject => Err(refuse()),
            OutOfBounds::Clamp => Ok(1),
        };
    }
    if size > i64::from(rule.max) {
        return match rule.above_max {
            OutOfBounds::Reject => Err(refuse()),
            OutOfBounds::Clamp => Ok(rule.max),
        };
    }
    Ok(u32::try_from(size).unwrap_or(rule.max))
}

/// `page` (zero-based, default 0, never negative) and `size` per the endpoint's rule.
pub fn page_request(params: &QueryParams, rule: SizeRule) -> Result<PageRequest, Error> {
    let page = match params.one("page")? {
        None => 0,
        Some(text) => {
            let page = parse_int("page", text)?;
            u64::try_from(page).map_err(|_| Error::invalid_field("page", "must not be negative"))?
        }
    };
    let size = bounded_size("size", params.one("size")?, rule)?;
    Ok(PageRequest { page, size })
}

/// Parses repeatable `sort` parameters against `allowed` (API property → store column). Without
/// any, `default` applies. A property the list does not have is 400 naming the sortable ones.
pub fn sort_keys(
    params: &QueryParams,
    allowed: &[(&str, &'static str)],
    default: &[SortKey],
) -> Result<Vec<SortKey>, Error> {
    sort_keys_refusing(params, allowed, default, |problem| Error::invalid_field("sort", problem))
}

/// [`sort_keys`] of the identity lists (users, roles, groups), where the spec answers a property
/// the list does not have with 500 ("Unknown sort property on identity lists is 500"); the
/// message still names the sortable ones. A malformed direction stays 400.
pub fn identity_sort_keys(
    params: &QueryParams,
    allowed: &[(&str, &'static str)],
    default: &[SortKey],
) -> Result<Vec<SortKey>, Error> {
    sort_keys_refusing(params, allowed, default, |problem| {
        Error::new(Code::UnknownSortProperty, format!("sort: {problem}"))
    })
}

fn sort_keys_refusing(
    params: &QueryParams,
    allowed: &[(&str, &'static str)],
    default: &[SortKey],
    unknown_property: impl Fn(String) -> Error,
) -> Result<Vec<SortKey>, Error> {
    let raw = params.raw_all("sort");
    if raw.is_empty() {
        return Ok(default.to_vec());
    }
    let names: Vec<&str> = allowed.iter().map(|(n, _)| *n).collect();
    let mut keys = Vec::new();
    for value in raw {
        let mut parts = value.split(',').map(str::trim);
        let property = parts.next().unwrap_or("");
        let direction = match parts.next() {
            None => SortDirection::Asc,
            Some(d) if d.eq_ignore_ascii_case("asc") => SortDirection::Asc,
            Some(d) if d.eq_ignore_ascii_case("desc") => SortDirection::Desc,
            Some(d) => return Err(Error::invalid_field("sort", format!("direction {d:?} must be asc or desc"))),
        };
        if parts.next().is_some() {
            return Err(Error::invalid_field("sort", format!("{value:?} must be property or property,asc|desc")));
        }
        let column =
            allowed.iter().find(|(name, _)| *name == property).map(|(_, column)| *column).ok_or_else(|| {
                unknown_property(format!("unknown property {property:?}; sortable: {}", names.join(", ")))
            })?;
        keys.push(SortKey { column, direction });
    }
    Ok(keys)
}

fn total_pages(total: u64, size: u32) -> u64 {
    total.div_ceil(u64::from(size.max(1)))
}

/// The envelope of an offset-paged list in the endpoint's style.
pub fn envelope<T: Serialize>(style: Style, page: &Page<T>, request: PageRequest) -> Value {
    let envelope = Envelope { style, items: &page.items, request, total: page.total };
    // The envelopes hold plain structs, lists and numbers: serializing them cannot fail.
    serde_json::to_value(envelope).unwrap_or(Value::Null)
}

/// The 200 answer of an offset-paged list: the page in the endpoint's envelope.
pub fn respond<T: Serialize>(style: Style, page: &Page<T>, request: PageRequest) -> Response {
    axum::Json(envelope(style, page, request)).into_response()
}

/// The page of a filter that cannot match anything (an unknown value where the endpoint answers
/// an empty page rather than a 400).
pub fn none_match<T>() -> Page<T> {
    Page { items: Vec::new(), total: 0 }
}

/// An offset-paged list's answer: `page` and `size` read by `rule`, that page fetched, and the
/// 200 in `style`'s envelope. The handler reads its filters first, so theirs are the first 400s.
pub async fn list<T: Serialize>(
    params: &QueryParams,
    rule: SizeRule,
    style: Style,
    fetch: impl AsyncFnOnce(PageRequest) -> Result<Page<T>, Error>,
) -> Result<Response, ApiError> {
    let request = page_request(params, rule)?;
    let page = fetch(request).await?;
    Ok(respond(style, &page, request))
}

/// The members of an offset style's envelope: the items, the page number, its size and the
/// total under the style's own names `[items, page, size, total]`, whether it counts pages
/// (`totalPages`), and what its schema says of its order and size. Each envelope is serialized
/// and documented from this one table, so the document cannot drift from the responses.
struct Members {
    names: [&'static str; 4],
    counts_pages: bool,
    order: &'static str,
    size_is: &'static str,
}

const AS_REQUESTED: &str = "The page size, as requested (or its default)";

impl Style {
    fn letter(self) -> &'static str {
        match self {
            Style::A => "A",
            Style::B => "B",
            Style::C => "C",
        }
    }

    fn members(self) -> Members {
        match self {
            Style::A => Members {
                names: ["content", "page", "size", "totalElements"],
                counts_pages: true,
                order: ", oldest or newest first as the endpoint says",
                size_is: AS_REQUESTED,
            },
            Style::B => Members {
                names: ["data", "page", "size", "totalItems"],
                counts_pages: true,
                order: "",
                size_is: "The page size after the endpoint's bounds",
            },
            Style::C => Members {
                names: ["items", "pageNumber", "pageSize", "totalResults"],
                counts_pages: false,
                order: "",
                size_is: AS_REQUESTED,
            },
        }
    }
}

/// An offset page in the envelope of `style`, as serialized.
struct Envelope<'a, T> {
    style: Style,
    items: &'a [T],
    request: PageRequest,
    total: u64,
}

impl<T: Serialize> Serialize for Envelope<'_, T> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        let Members { names: [items, page, size, total], counts_pages, .. } = self.style.members();
        let mut envelope = serializer.serialize_struct("Envelope", if counts_pages { 5 } else { 4 })?;
        envelope.serialize_field(items, self.items)?;
        envelope.serialize_field(page, &self.request.page)?;
        envelope.serialize_field(size, &self.request.size)?;
        envelope.serialize_field(total, &self.total)?;
        if counts_pages {
            envelope.serialize_field("totalPages", &total_pages(self.total, self.request.size))?;
        }
        envelope.end()
    }
}

/// The style an [`OffsetPage`] is serialized and documented in.
pub trait OffsetStyle {
    const STYLE: Style;
}

/// Paging style A.
#[derive(Debug)]
pub enum StyleA {}
/// Paging style B.
#[derive(Debug)]
pub enum StyleB {}
/// Paging style C.
#[derive(Debug)]
pub enum StyleC {}

impl OffsetStyle for StyleA {
    const STYLE: Style = Style::A;
}
impl OffsetStyle for StyleB {
    const STYLE: Style = Style::B;
}
impl OffsetStyle for StyleC {
    const STYLE: Style = Style::C;
}

/// One page of an offset-paged list in style `S`'s envelope (see [`Members`]); a named type
/// where a response holds a page (a group's members) or the document names one.
#[derive(Debug)]
pub struct OffsetPage<T, S> {
    items: Vec<T>,
    request: PageRequest,
    total: u64,
    style: PhantomData<S>,
}

/// Style A: `content`, `page`, `size`, `totalElements`, `totalPages`.
pub type PageA<T> = OffsetPage<T, StyleA>;
/// Style B: `data`, `page`, `size`, `totalItems`, `totalPages`.
pub type PageB<T> = OffsetPage<T, StyleB>;
/// Style C: `items`, `pageNumber`, `pageSize`, `totalResults`.
pub type PageC<T> = OffsetPage<T, StyleC>;

impl<T, S> OffsetPage<T, S> {
    pub fn new(page: Page<T>, request: PageRequest) -> Self {
        Self { items: page.items, request, total: page.total, style: PhantomData }
    }
}

impl<T: Serialize, S: OffsetStyle> Serialize for OffsetPage<T, S> {
    fn serialize<Z: Serializer>(&self, serializer: Z) -> Result<Z::Ok, Z::Error> {
        Envelope { style: S::STYLE, items: &self.items, request: self.request, total: self.total }.serialize(serializer)
    }
}

/// Style D: `items`, `nextCursor` (always present, null on the last page), `limit`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PageD<T> {
    pub items: Vec<T>,
    pub next_cursor: Option<String>,
    pub limit: u32,
}

/// The schemas of the envelopes, written by hand: utoipa's derive names a generic schema
/// `PageA_CustomerOut` and inlines the item's whole schema into it, where a client generator
/// wants one named envelope per listed type that refers to the item's own schema.
mod schema {
    use std::borrow::Cow;
    use utoipa::openapi::schema::{ArrayBuilder, KnownFormat, ObjectBuilder, Schema, SchemaFormat, SchemaType, Type};
    use utoipa::openapi::{Ref, RefOr};
    use utoipa::{PartialSchema, ToSchema};

    use super::{Members, OffsetPage, OffsetStyle, PageD};

    fn count(description: &str) -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::Integer)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int64)))
            .minimum(Some(0))
            .description(Some(description))
            .into()
    }

    fn list_of<T: ToSchema>(description: &str) -> RefOr<Schema> {
        ArrayBuilder::new().items(Ref::from_schema_name(T::name())).description(Some(description)).into()
    }

    /// The item's name without the `Out` suffix of response types: `CustomerOut` lists as
    /// `CustomerPageA`.
    pub(super) fn page_name<T: ToSchema>(style: &str) -> Cow<'static, str> {
        let item = T::name();
        let base = item.strip_suffix("Out").unwrap_or(&item);
        Cow::Owned(format!("{base}Page{style}"))
    }

    /// An envelope refers to its item's schema, which it brings into the document.
    fn item_schemas<T: ToSchema>(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((T::name().into_owned(), T::schema()));
        T::schemas(schemas);
    }

    fn object(description: String, fields: Vec<(&str, RefOr<Schema>)>) -> RefOr<Schema> {
        let mut object = ObjectBuilder::new().description(Some(description));
        for (name, schema) in fields {
            object = object.property(name, schema).required(name);
        }
        object.into()
    }

    /// An offset page's envelope (styles A to C), from its style's [`Members`].
    impl<T: ToSchema, S: OffsetStyle> PartialSchema for OffsetPage<T, S> {
        fn schema() -> RefOr<Schema> {
            let Members { names: [items, page, size, total], counts_pages, order, size_is } = S::STYLE.members();
            let mut fields = vec![
                (items, list_of::<T>("The page's items; empty past the last page")),
                (page, count("The zero-based page number, as requested")),
                (size, count(size_is)),
                (total, count("Items matching the filters, on every page")),
            ];
            if counts_pages {
                fields.push(("totalPages", count(&format!("ceil({total} / size)"))));
            }
            let description = format!("Paging style {}: one page of {}{order}.", S::STYLE.letter(), T::name());
            object(description, fields)
        }
    }

    impl<T: ToSchema, S: OffsetStyle> ToSchema for OffsetPage<T, S> {
        fn name() -> Cow<'static, str> {
            page_name::<T>(S::STYLE.letter())
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            item_schemas::<T>(schemas);
        }
    }

    impl<T: ToSchema> PartialSchema for PageD<T> {
        fn schema() -> RefOr<Schema> {
            let next = ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::String, Type::Null])).description(
                Some("Opaque; pass it as `cursor` with the same filters for the next page. Null on the last page"),
            );
            object(
                format!("Paging style D: one keyset page of {}.", T::name()),
                vec![
                    ("items", list_of::<T>("At most `limit` items")),
                    ("nextCursor", next.into()),
                    ("limit", count("The limit, as requested (or its default)")),
                ],
            )
        }
    }

    impl<T: ToSchema> ToSchema for PageD<T> {
        fn name() -> Cow<'static, str> {
            page_name::<T>("D")
        }

        fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
            item_schemas::<T>(schemas);
        }
    }
}

/// Signs and checks cursors. The key is shared by every node through the store.
#[derive(Clone)]
pub struct CursorCodec {
    key: Vec<u8>,
}

impl std::fmt::Debug for CursorCodec {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CursorCodec(..)")
    }
}

type HmacSha256 = Hmac<Sha256>;

/// A hash of an endpoint's normalised filters; a cursor only works with the filters it was
/// issued for.
pub fn filters_fingerprint(filters: &[(&str, Option<String>)]) -> String {
    let mut hasher = Sha256::new();
    for (name, value) in filters {
        hasher.update(name.as_bytes());
        hasher.update([0]);
        if let Some(v) = value {
            hasher.update([1]);
            hasher.update(v.as_bytes());
        }
        hasher.update([0xff]);
    }
    URL_SAFE_NO_PAD.encode(&hasher.finalize()[..16])
}

/// What a cursor is bound to: the endpoint that issued it, the organisation and the filters (a
/// [`filters_fingerprint`]).
pub fn cursor_binding(endpoint: &str, tenant: TenantId, filters: &str) -> String {
    format!("{endpoint}|{tenant}|{filters}")
}

fn bad_cursor() -> Error {
    Error::invalid_field("cursor", "was not issued by this endpoint for these filters; restart without a cursor")
        .with_code(Code::InvalidCursor)
}

impl CursorCodec {
    pub fn new(key: Vec<u8>) -> Self {
        Self { key }
    }

    fn mac(&self, payload: &[u8]) -> HmacSha256 {
        // HMAC accepts keys of any length; `new_from_slice` cannot fail for it.
        let mut mac = <HmacSha256 as Mac>::new_from_slice(&self.key)
            .unwrap_or_else(|_| unreachable!("HMAC takes any key length"));
        mac.update(payload);
        mac
    }

    pub fn encode(&self, binding: &str, position: KeysetPosition) -> String {
        let payload = json!({ "b": binding, "t": position.at_micros, "i": position.id }).to_string();
        let tag = self.mac(payload.as_bytes()).finalize().into_bytes();
        format!("{}.{}", URL_SAFE_NO_PAD.encode(payload), URL_SAFE_NO_PAD.encode(tag))
    }

    pub fn decode(&self, binding: &str, cursor: &str) -> Result<KeysetPosition, Error> {
        let (payload, tag) = cursor.split_once('.').ok_or_else(bad_cursor)?;
        let payload = URL_SAFE_NO_PAD.decode(payload).map_err(|_| bad_cursor())?;
        let tag = URL_SAFE_NO_PAD.decode(tag).map_err(|_| bad_cursor())?;
        self.mac(&payload).verify_slice(&tag).map_err(|_| bad_cursor())?;
        let doc: Value = serde_json::from_slice(&payload).map_err(|_| bad_cursor())?;
        if doc["b"] != binding {
            return Err(bad_cursor());
        }
        let at_micros = doc["t"].as_i64().ok_or_else(bad_cursor)?;
        let id = doc["i"].as_str().and_then(|s| Uuid::parse_str(s).ok()).ok_or_else(bad_cursor)?;
        Ok(KeysetPosition { at_micros, id })
    }
}

/// A parsed style-D request: the keyset window to fetch (one more than `limit`, to learn
/// whether another page exists), and what its cursors are bound to.
#[derive(Debug, Clone)]
pub struct CursorRequest {
    pub limit: u32,
    pub after: Option<KeysetPosition>,
    binding: String,
}

impl CursorRequest {
    /// `filters` comes from [`filters_fingerprint`] over the endpoint's normalised filters.
    pub fn parse(
        params: &QueryParams,
        rule: SizeRule,
        codec: &CursorCodec,
        endpoint: &str,
        tenant: TenantId,
        filters: &str,
    ) -> Result<Self, Error> {
        let binding = cursor_binding(endpoint, tenant, filters);
        let limit = bounded_size("limit", params.one("limit")?, rule)?;
        let after = params.one("cursor")?.map(|c| codec.decode(&binding, c)).transpose()?;
        Ok(Self { limit, after, binding })
    }

    pub fn window(&self) -> KeysetRequest {
        KeysetRequest { after: self.after, limit: self.limit + 1 }
    }

    /// The style-D envelope: `items` up to `limit`, `nextCursor` pointing after the last one
    /// when more exist (always present, null on the last page).
    pub fn envelope<T, O: Serialize>(
        &self,
        mut fetched: Vec<T>,
        position: impl Fn(&T) -> KeysetPosition,
        view: impl Fn(&T) -> O,
        codec: &CursorCodec,
    ) -> PageD<O> {
        let more = fetched.len() > self.limit as usize;
        fetched.truncate(self.limit as usize);
        let next = if more { fetched.last().map(|last| codec.encode(&self.binding, position(last))) } else { None };
        PageD { items: fetched.iter().map(view).collect(), next_cursor: next, limit: self.limit }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(q: &str) -> QueryParams {
        QueryParams::parse(q)
    }

    #[test]
    fn strict_sizes_reject_and_clamped_sizes_clamp() {
        assert_eq!(page_request(&params(""), STRICT_SIZE).map(|p| (p.page, p.size)).ok(), Some((0, 20)));
        assert!(page_request(&params("size=0"), STRICT_SIZE).is_err());
        assert!(page_request(&params("size=101"), STRICT_SIZE).is_err());
        assert!(page_request(&params("page=-1"), STRICT_SIZE).is_err());
        assert!(page_request(&params("page=x"), STRICT_SIZE).is_err());
        assert_eq!(page_request(&params("size=500"), AUDIT_SIZE).map(|p| p.size).ok(), Some(100));
        assert!(page_request(&params("size=0"), AUDIT_SIZE).is_err());
        assert_eq!(page_request(&params("size=0"), CLAMPED_SIZE).map(|p| p.size).ok(), Some(1));
        // Past the 64-bit range, still a whole number: clamped where sizes clamp.
        assert_eq!(page_request(&params("size=99999999999999999999"), AUDIT_SIZE).map(|p| p.size).ok(), Some(100));
        assert_eq!(page_request(&params("size=99999999999999999999"), CLAMPED_SIZE).map(|p| p.size).ok(), Some(100));
        assert_eq!(page_request(&params("size=-99999999999999999999"), CLAMPED_SIZE).map(|p| p.size).ok(), Some(1));
        assert!(page_request(&params("size=99999999999999999999"), STRICT_SIZE).is_err());
        assert!(page_request(&params("size=1e3"), CLAMPED_SIZE).is_err());
    }

    #[test]
    fn style_c_envelope() {
        let page = Page { items: vec![1, 2], total: 5 };
        let v = envelope(Style::C, &page, PageRequest { page: 1, size: 2 });
        assert_eq!(v, json!({ "items": [1, 2], "pageNumber": 1, "pageSize": 2, "totalResults": 5 }));
    }

    #[derive(Serialize, utoipa::ToSchema)]
    struct ItemOut {
        n: u32,
    }

    /// Each envelope's schema names exactly the members it serializes, all required.
    fn documents_what_it_serializes<P: Serialize + utoipa::ToSchema>(page: P) {
        use utoipa::openapi::RefOr;
        use utoipa::openapi::schema::Schema;
        let serialized: std::collections::BTreeSet<String> = serde_json::to_value(page)
            .ok()
            .and_then(|v| v.as_object().map(|o| o.keys().cloned().collect()))
            .unwrap_or_default();
        let RefOr::T(Schema::Object(object)) = P::schema() else { panic!("{} is not an object schema", P::name()) };
        let documented: std::collections::BTreeSet<String> = object.properties.keys().cloned().collect();
        let required: std::collections::BTreeSet<String> = object.required.iter().cloned().collect();
        assert_eq!(serialized, documented, "{}", P::name());
        assert_eq!(serialized, required, "{}", P::name());
    }

    #[test]
    fn envelopes_are_documented_as_they_are_serialized() {
        let page = || Page { items: vec![ItemOut { n: 1 }], total: 1 };
        let request = PageRequest { page: 0, size: 20 };
        documents_what_it_serializes(PageA::new(page(), request));
        documents_what_it_serializes(PageB::new(page(), request));
        documents_what_it_serializes(PageC::new(page(), request));
        documents_what_it_serializes(PageD { items: vec![ItemOut { n: 1 }], next_cursor: None, limit: 20 });
        use utoipa::ToSchema;
        assert_eq!(PageA::<ItemOut>::name(), "ItemPageA");
        assert_eq!(PageD::<ItemOut>::name(), "ItemPageD");
    }

    #[test]
    fn sorts_parse_and_validate() {
        let allowed = [("name", "name"), ("createdAt", "created_at")];
        let keys = sort_keys(&params("sort=name,desc&sort=createdAt"), &allowed, &[]).unwrap_or_default();
        assert_eq!(
            keys,
            vec![
                SortKey { column: "name", direction: SortDirection::Desc },
                SortKey { column: "created_at", direction: SortDirection::Asc }
            ]
        );
        assert!(sort_keys(&params("sort=nope"), &allowed, &[]).is_err());
        assert!(sort_keys(&params("sort=name,up"), &allowed, &[]).is_err());
        assert!(sort_keys(&params("sort=name,asc,desc"), &allowed, &[]).is_err());
    }

    #[test]
    fn cursors_are_bound_and_tamper_proof() {
        let codec = CursorCodec::new(b"k".to_vec());
        let pos = KeysetPosition { at_micros: 42, id: Uuid::nil() };
        let c = codec.encode("events|t1|f1", pos);
        assert_eq!(codec.decode("events|t1|f1", &c).ok(), Some(pos));
        assert!(codec.decode("events|t1|f2", &c).is_err());
        assert!(codec.decode("events|t2|f1", &c).is_err());
        assert!(codec.decode("other|t1|f1", &c).is_err());
        assert!(CursorCodec::new(b"other".to_vec()).decode("events|t1|f1", &c).is_err());
        let mut tampered = c.clone();
        tampered.replace_range(0..1, if c.starts_with('e') { "f" } else { "e" });
        assert!(codec.decode("events|t1|f1", &tampered).is_err());
        assert!(codec.decode("events|t1|f1", "garbage").is_err());
    }
}
