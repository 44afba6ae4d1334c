//! An organisation's policy templates as read from and written to either backend.

use super::SaturatingInt;
use tokenops_domain::policy::TenantTemplate;

stored_table! {
    columns TEMPLATE_COLUMNS of "policy_templates";
    table TEMPLATES by template_key;
    decode tenant_template -> TenantTemplate, encode;
    {
        tenant_id,
        key [template_key],
        template_version: SaturatingInt,
        name, description, action, status, default_content, created_by, created_at, updated_at,
    }
}
