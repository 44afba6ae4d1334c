//! The script sandbox's limits (`TOKENOPS_SCRIPT_*`), each bounded so that a typo cannot lift one.

use super::sources::Reader;

pub(super) fn limits(r: &mut Reader, d: &tokenops_scripting::Limits) -> tokenops_scripting::Limits {
    let max_call_depth = r.count("TOKENOPS_SCRIPT_MAX_CALL_DEPTH", d.max_call_depth, 1, 1_000);
    let max_string_len = r.count("TOKENOPS_SCRIPT_MAX_STRING_BYTES", d.max_string_len, 1, 64 * 1_048_576);
    let max_array_len = r.count("TOKENOPS_SCRIPT_MAX_ARRAY_LEN", d.max_array_len, 1, 10_000_000);
    let max_map_len = r.count("TOKENOPS_SCRIPT_MAX_MAP_LEN", d.max_map_len, 1, 10_000_000);
    let max_log_lines = r.count("TOKENOPS_SCRIPT_MAX_LOG_LINES", d.max_log_lines, 1, 1_000_000);
    let max_submissions = r.count("TOKENOPS_SCRIPT_MAX_SUBMISSIONS", d.max_submissions, 1, 100_000);
    // At least 1 MiB: the run's engine and its compiled script count towards it too.
    let max_memory = r.count("TOKENOPS_SCRIPT_MAX_MEMORY_BYTES", d.max_memory, 1_048_576, 16 * 1_073_741_824);
    let max_operations = r
        .integer("TOKENOPS_SCRIPT_MAX_OPERATIONS", i64::try_from(d.max_operations).unwrap_or(i64::MAX), 1, i64::MAX)
        .unsigned_abs();
    let wall_ms = i64::try_from(d.max_wall.as_millis()).unwrap_or(30_000);
    let max_wall = r.millis("TOKENOPS_SCRIPT_MAX_WALL_MS", wall_ms, 10, 3_600_000);
    tokenops_scripting::Limits {
        max_operations,
        max_call_depth,
        max_string_len,
        max_array_len,
        max_map_len,
        max_log_lines,
        max_submissions,
        max_wall,
        max_memory,
        ..d.clone()
    }
}
