//! Roles of an organisation: today the platform roles; custom roles join them with the identity
//! area. Lists are sorted and paged here because the platform roles are not stored rows.

use std::cmp::Ordering;
use tokenops_domain::TenantId;
use tokenops_domain::paging::{Page, PageRequest, SortDirection, SortKey};
use tokenops_domain::role::{Role, platform_roles};

#[derive(Debug, Default)]
pub struct Roles;

fn compare(a: &Role, b: &Role, key: &SortKey) -> Ordering {
    let ordering = match key.column {
        "name" => a.name.cmp(&b.name),
        "description" => a.description.cmp(&b.description),
        "created_at" => a.created_at.cmp(&b.created_at),
        "updated_at" => a.updated_at.cmp(&b.updated_at),
        _ => a.id.cmp(&b.id),
    };
    match key.direction {
        SortDirection::Asc => ordering,
        SortDirection::Desc => ordering.reverse(),
    }
}

impl Roles {
    /// The roles the organisation can assign, ordered by `sort` then id, one page of them.
    pub fn list(&self, _tenant: TenantId, sort: &[SortKey], page: PageRequest) -> Page<Role> {
        let mut roles = platform_roles();
        roles.sort_by(|a, b| {
            sort.iter().map(|key| compare(a, b, key)).find(|o| o.is_ne()).unwrap_or_else(|| a.id.cmp(&b.id))
        });
        let total = roles.len() as u64;
        let items = roles
            .into_iter()
            .skip(usize::try_from(page.offset()).unwrap_or(usize::MAX))
            .take(page.size as usize)
            .collect();
        Page { items, total }
    }
}
