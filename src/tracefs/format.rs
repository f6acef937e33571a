//! Stage 1a: parse a tracefs `format` file into fields.
//!
//! Pure text parsing: no I/O, no knowledge of any particular event. The kernel writes
//! one `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:S;` line per field; everything
//! about a field's shape has to be recovered from the TYPE and NAME spelling.

use std::fmt;

/// How the bytes of a field are laid out in the raw record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FieldShape {
    /// A plain scalar (integer, pointer, bool, enum, typedef).
    Scalar,
    /// A fixed-size array, `char disk[32]`. `len` is `None` when the kernel printed a
    /// symbolic length it did not expand.
    Array { len: Option<u32> },
    /// A flexible array at the end of the record (`char buf[]`, size 0): the rest of
    /// the record belongs to it.
    Rest,
    /// `__data_loc TYPE[] name`: a u32 (or u16 pair) whose low 16 bits are the offset
    /// from the start of the record and high 16 bits the length.
    DataLoc,
    /// `__rel_loc TYPE[] name`: like `DataLoc`, but the offset counts from the end of
    /// the field itself.
    RelLoc,
}

/// One field of an event record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    /// The C type as printed, without the name or array suffix (`unsigned int`,
    /// `char`, `__data_loc char[]`).
    pub type_name: String,
    pub offset: u32,
    pub size: u32,
    pub signed: bool,
    pub shape: FieldShape,
}

/// A parsed `format` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventFormat {
    pub name: String,
    /// The value for `perf_event_attr.config`, and the record's `common_type`.
    pub id: u64,
    /// Every field, the `common_*` header included, in file order.
    pub fields: Vec<Field>,
    pub print_fmt: String,
}

impl EventFormat {
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.fields.iter().find(|f| f.name == name)
    }

    /// The smallest record that holds every fixed-position field.
    pub fn fixed_size(&self) -> u32 {
        self.fields
            .iter()
            .map(|f| f.offset.saturating_add(f.size))
            .max()
            .unwrap_or(0)
    }
}

/// Why a format file could not be parsed; carries the 1-based line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FormatError {
    pub line: usize,
    pub reason: String,
}

impl fmt::Display for FormatError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.reason)
    }
}

impl std::error::Error for FormatError {}

fn err(line: usize, reason: impl Into<String>) -> FormatError {
    FormatError {
        line,
        reason: reason.into(),
    }
}

/// Parse the text of one `format` file.
pub fn parse_format(text: &str) -> Result<EventFormat, FormatError> {
    let mut name = None;
    let mut id = None;
    let mut fields = Vec::new();
    let mut print_fmt = String::new();
    for (i, raw_line) in text.lines().enumerate() {
        let lineno = i + 1;
        let line = raw_line.trim();
        if let Some(rest) = line.strip_prefix("name:") {
            name = Some(rest.trim().to_string());
        } else if let Some(rest) = line.strip_prefix("ID:") {
            let v = rest.trim();
            id = Some(
                v.parse::<u64>()
                    .map_err(|_| err(lineno, format!("ID `{v}` is not a number")))?,
            );
        } else if line.starts_with("field:") {
            fields.push(parse_field_line(line).map_err(|r| err(lineno, r))?);
        } else if let Some(rest) = line.strip_prefix("print fmt:") {
            print_fmt = rest.trim().to_string();
        }
    }
    let name = name.ok_or_else(|| err(1, "no `name:` line"))?;
    let id = id.ok_or_else(|| err(1, "no `ID:` line"))?;
    if fields.is_empty() {
        return Err(err(1, "no `field:` lines"));
    }
    Ok(EventFormat {
        name,
        id,
        fields,
        print_fmt,
    })
}

/// `field:TYPE NAME;\toffset:N;\tsize:N;\tsigned:S;` (`signed` is absent on old kernels).
fn parse_field_line(line: &str) -> Result<Field, String> {
    let mut decl = None;
    let mut offset = None;
    let mut size = None;
    let mut signed = false;
    for part in line.split(';') {
        let part = part.trim();
        if let Some(v) = part.strip_prefix("field:") {
            decl = Some(v.trim());
        } else if let Some(v) = part.strip_prefix("offset:") {
            offset = Some(parse_num(v, "offset")?);
        } else if let Some(v) = part.strip_prefix("size:") {
            size = Some(parse_num(v, "size")?);
        } else if let Some(v) = part.strip_prefix("signed:") {
            signed = parse_num(v, "signed")? != 0;
        }
    }
    let decl = decl.ok_or("no field declaration")?;
    let offset = offset.ok_or_else(|| format!("field `{decl}` has no offset"))?;
    let size = size.ok_or_else(|| format!("field `{decl}` has no size"))?;
    let (type_name, name, shape) = split_decl(decl, size)?;
    Ok(Field {
        name,
        type_name,
        offset,
        size,
        signed,
        shape,
    })
}

fn parse_num(v: &str, what: &str) -> Result<u32, String> {
    v.trim()
        .parse::<u32>()
        .map_err(|_| format!("{what} `{}` is not a number", v.trim()))
}

/// Split `TYPE NAME[SUFFIX]` into type, name and shape.
fn split_decl(decl: &str, size: u32) -> Result<(String, String, FieldShape), String> {
    let dynamic = if decl.starts_with("__data_loc") {
        Some(FieldShape::DataLoc)
    } else if decl.starts_with("__rel_loc") {
        Some(FieldShape::RelLoc)
    } else {
        None
    };
    // The name is the last identifier; an array suffix may follow it.
    let (head, suffix) = match decl.rfind('[') {
        Some(open) if decl.ends_with(']') && !decl[..open].ends_with(' ') => {
            // `char disk[32]` → head `char disk`, suffix `32`. For `__data_loc char[] x`
            // the `[` is not the last bracket group, so this arm is not taken.
            (&decl[..open], Some(&decl[open + 1..decl.len() - 1]))
        }
        _ => (decl, None),
    };
    let head = head.trim_end();
    // The name starts after the last character that cannot be in an identifier; that
    // character may be several bytes long (garbage, or a non-ASCII spelling).
    let name_start = head
        .char_indices()
        .rev()
        .find(|&(_, c)| !(c.is_ascii_alphanumeric() || c == '_'))
        .map_or(0, |(p, c)| p + c.len_utf8());
    let name = &head[name_start..];
    if name.is_empty() || name.starts_with(|c: char| c.is_ascii_digit()) {
        return Err(format!("cannot find the field name in `{decl}`"));
    }
    let type_name = head[..name_start].trim().to_string();
    if type_name.is_empty() {
        return Err(format!("field `{name}` has no type"));
    }
    let shape = match (dynamic, suffix) {
        (Some(d), _) => d,
        (None, None) => FieldShape::Scalar,
        (None, Some("")) if size == 0 => FieldShape::Rest,
        (None, Some(len)) => FieldShape::Array {
            len: len.trim().parse::<u32>().ok(),
        },
    };
    Ok((type_name, name.to_string(), shape))
}

#[cfg(test)]
mod tests {
    use super::*;

    const ISSUE: &str = "name: block_rq_issue
ID: 2104
format:
\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;
\tfield:unsigned char common_flags;\toffset:2;\tsize:1;\tsigned:0;
\tfield:unsigned char common_preempt_count;\toffset:3;\tsize:1;\tsigned:0;
\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;

\tfield:dev_t dev;\toffset:8;\tsize:4;\tsigned:0;
\tfield:sector_t sector;\toffset:16;\tsize:8;\tsigned:0;
\tfield:char rwbs[10];\toffset:34;\tsize:10;\tsigned:0;
\tfield:__data_loc char[] cmd;\toffset:60;\tsize:4;\tsigned:0;

print fmt: \"%d,%d\", REC->dev
";

    #[test]
    fn parses_block_rq_issue() {
        let f = parse_format(ISSUE).unwrap();
        assert_eq!(f.name, "block_rq_issue");
        assert_eq!(f.id, 2104);
        assert_eq!(f.fields.len(), 8);
        let pid = f.field("common_pid").unwrap();
        assert!(pid.signed);
        assert_eq!((pid.offset, pid.size), (4, 4));
        assert_eq!(f.field("dev").unwrap().type_name, "dev_t");
        assert_eq!(f.field("sector").unwrap().shape, FieldShape::Scalar);
        let rwbs = f.field("rwbs").unwrap();
        assert_eq!(rwbs.shape, FieldShape::Array { len: Some(10) });
        assert_eq!(rwbs.type_name, "char");
        let cmd = f.field("cmd").unwrap();
        assert_eq!(cmd.shape, FieldShape::DataLoc);
        assert_eq!(cmd.type_name, "__data_loc char[]");
        assert_eq!(f.print_fmt, "\"%d,%d\", REC->dev");
        assert_eq!(f.fixed_size(), 64);
    }

    fn one(decl: &str, size: u32) -> Field {
        parse_field_line(&format!(
            "field:{decl};\toffset:8;\tsize:{size};\tsigned:0;"
        ))
        .unwrap()
    }

    #[test]
    fn every_field_shape() {
        assert_eq!(one("u64 x", 8).shape, FieldShape::Scalar);
        assert_eq!(
            one("u8 cdw10[24]", 24).shape,
            FieldShape::Array { len: Some(24) }
        );
        assert_eq!(
            one("char name[TASK_COMM_LEN]", 16).shape,
            FieldShape::Array { len: None }
        );
        let rest = one("unsigned long args[]", 0);
        assert_eq!((rest.shape, rest.name.as_str()), (FieldShape::Rest, "args"));
        let dl = one("__data_loc u64[] stack", 4);
        assert_eq!((dl.shape, dl.name.as_str()), (FieldShape::DataLoc, "stack"));
        let rl = one("__rel_loc char[] msg", 4);
        assert_eq!((rl.shape, rl.name.as_str()), (FieldShape::RelLoc, "msg"));
        let p = one("const struct iovec * vec", 8);
        assert_eq!(
            (p.type_name.as_str(), p.name.as_str()),
            ("const struct iovec *", "vec")
        );
        let p2 = one("void *ptr", 8);
        assert_eq!((p2.type_name.as_str(), p2.name.as_str()), ("void *", "ptr"));
        let b = one("bool metadata", 1);
        assert_eq!(b.type_name, "bool");
        // header_page spells a leading space after `field:`.
        assert_eq!(one(" u64 timestamp", 8).name, "timestamp");
    }

    #[test]
    fn a_non_ascii_character_before_the_name_is_an_error_or_a_type_not_a_panic() {
        let f = parse_field_line("field:int commo\u{e9}_pid;\toffset:4;\tsize:4;").unwrap();
        assert_eq!(
            (f.type_name.as_str(), f.name.as_str()),
            ("int commo\u{e9}", "_pid")
        );
        assert!(parse_field_line("field:int \u{20ac};\toffset:4;\tsize:4;").is_err());
    }

    #[test]
    fn signed_is_optional_and_read() {
        let f = parse_field_line("field:int error;\toffset:28;\tsize:4;").unwrap();
        assert!(!f.signed);
        let f = parse_field_line("field:int error;\toffset:28;\tsize:4;\tsigned:1;").unwrap();
        assert!(f.signed);
    }

    #[test]
    fn bad_input_is_an_error_with_a_line() {
        assert!(parse_format("").is_err());
        let no_id = "name: x\nformat:\n\tfield:int a;\toffset:0;\tsize:4;\tsigned:1;\n";
        assert!(parse_format(no_id).unwrap_err().reason.contains("ID"));
        let bad = "name: x\nID: 1\nformat:\n\tfield:int a;\toffset:zz;\tsize:4;\tsigned:1;\n";
        let e = parse_format(bad).unwrap_err();
        assert_eq!(e.line, 4);
        assert!(e.reason.contains("offset"), "{e}");
        let noname = "name: x\nID: 1\n\tfield:int;\toffset:0;\tsize:4;\n";
        assert!(parse_format(noname).is_err());
        let bad_id = "name: x\nID: one\n";
        assert!(parse_format(bad_id).unwrap_err().reason.contains("one"));
    }
}
