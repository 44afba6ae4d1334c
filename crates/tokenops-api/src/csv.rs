//! CSV as exports write it: RFC 4180 (CRLF line ends; a cell holding a comma, quote or line
//! break is quoted, its quotes doubled), with cells a spreadsheet would run as a formula
//! neutralised the way OWASP's CSV-injection advice says, reversibly: a cell that starts with `'`
//! gets one more, so removing one leading `'` always gives the value back (the audit chain's
//! verifier does).

/// Appends one record of `cells` to `out`.
pub fn push_row<'a>(out: &mut String, cells: impl IntoIterator<Item = &'a str>) {
    for (i, cell) in cells.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        push_cell(out, cell);
    }
    out.push_str("\r\n");
}

/// A cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is read as a formula
/// by spreadsheets: it gets a leading `'`, which they show as text and do not run. So does a cell
/// that starts with `'`, so that a reader can tell the two apart.
fn push_cell(out: &mut String, cell: &str) {
    let formula = cell.starts_with(['=', '+', '-', '@', '\t', '\r', '\'']);
    let quoted = formula || cell.contains([',', '"', '\r', '\n']);
    if quoted {
        out.push('"');
    }
    if formula {
        out.push('\'');
    }
    for c in cell.chars() {
        if c == '"' {
            out.push('"');
        }
        out.push(c);
    }
    if quoted {
        out.push('"');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(cells: &[&str]) -> String {
        let mut out = String::new();
        push_row(&mut out, cells.iter().copied());
        out
    }

    #[test]
    fn plain_cells_stay_as_they_are_and_rows_end_with_crlf() {
        assert_eq!(row(&["a", "", "b c"]), "a,,b c\r\n");
    }

    #[test]
    fn commas_quotes_and_line_breaks_are_quoted_with_quotes_doubled() {
        assert_eq!(row(&["a,b", "say \"hi\"", "x\ny", "r\rs"]), "\"a,b\",\"say \"\"hi\"\"\",\"x\ny\",\"r\rs\"\r\n");
    }

    #[test]
    fn formula_cells_are_neutralised() {
        for (cell, expected) in [
            ("=1+1", "\"'=1+1\""),
            ("+SUM(A1)", "\"'+SUM(A1)\""),
            ("-2", "\"'-2\""),
            ("@cmd", "\"'@cmd\""),
            ("\tx", "\"'\tx\""),
            ("\rx", "\"'\rx\""),
            ("=HYPERLINK(\"http://x\",\"y\")", "\"'=HYPERLINK(\"\"http://x\"\",\"\"y\"\")\""),
        ] {
            assert_eq!(row(&[cell]), format!("{expected}\r\n"), "{cell:?}");
        }
        assert_eq!(row(&["a=b"]), "a=b\r\n", "only a leading sign is a formula");
        assert_eq!(row(&["'x"]), "\"''x\"\r\n", "a leading ' is doubled, so the rule can be undone");
    }
}
