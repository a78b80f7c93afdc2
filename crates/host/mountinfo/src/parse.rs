//! Reading mountinfo lines into [`Mount`]s.

use std::ffi::OsString;

use crate::decimal::decimal;
use crate::{
    unescape, Field, Malformed, Mount, OptionalField, ParseError, MAX_LINE_LEN, MAX_OPTIONAL_FIELDS,
};

/// Reads a mountinfo file lazily: one result per non-empty line, an error naming the line's
/// number and text. A caller may skip bad lines or stop at the first.
pub fn parse(text: &[u8]) -> impl Iterator<Item = Result<Mount, ParseError>> + '_ {
    text.split(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| !line.is_empty())
        .map(|(i, line)| parse_line(line).map_err(|reason| ParseError::new(i + 1, line, reason)))
}

/// Reads one mountinfo line (without its newline). Fields are separated by single spaces; an
/// empty field (a mount source of `""`) is read as empty. Fields the kernel may add after the
/// super options are ignored, as proc(5) asks of unknown optional fields.
pub fn parse_line(line: &[u8]) -> Result<Mount, Malformed> {
    if line.len() > MAX_LINE_LEN {
        return Err(Malformed::TooLong);
    }
    let mut fields = line.split(|&b| b == b' ');
    let mut next = |field| fields.next().ok_or(Malformed::Missing(field));
    let number = |raw: &[u8], field| decimal(raw).ok_or(Malformed::NotANumber(field));

    let mount_id = number(next(Field::MountId)?, Field::MountId)?;
    let parent_id = number(next(Field::ParentId)?, Field::ParentId)?;
    let (major, minor) =
        device(next(Field::Device)?).ok_or(Malformed::NotANumber(Field::Device))?;
    let root = unescape(next(Field::Root)?).into();
    let mount_point = unescape(next(Field::MountPoint)?).into();
    let mount_options = options(next(Field::MountOptions)?);

    let mut optional_fields = Vec::new();
    loop {
        match fields.next() {
            None => return Err(Malformed::NoSeparator),
            Some(b"-") => break,
            Some(_) if optional_fields.len() == MAX_OPTIONAL_FIELDS => {
                return Err(Malformed::TooManyOptionalFields)
            }
            Some(raw) => optional_fields.push(OptionalField::parse(raw)),
        }
    }

    let mut next = |field| fields.next().ok_or(Malformed::Missing(field));
    let fs_type = unescape(next(Field::FsType)?);
    let source = unescape(next(Field::Source)?);
    let super_options = options(next(Field::SuperOptions)?);
    Ok(Mount {
        mount_id,
        parent_id,
        major,
        minor,
        root,
        mount_point,
        mount_options,
        optional_fields,
        fs_type,
        source,
        super_options,
    })
}

/// A comma-separated option list, each option unescaped (`seq_show_option()` escapes a comma
/// inside a value as `\054`); an empty list has no options.
fn options(raw: &[u8]) -> Vec<OsString> {
    raw.split(|&b| b == b',')
        .filter(|o| !o.is_empty())
        .map(unescape)
        .collect()
}

/// `major:minor` as two numbers.
fn device(raw: &[u8]) -> Option<(u32, u32)> {
    let colon = raw.iter().position(|&b| b == b':')?;
    Some((decimal(&raw[..colon])?, decimal(&raw[colon + 1..])?))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn one(line: &str) -> Mount {
        parse_line(line.as_bytes()).unwrap_or_else(|e| panic!("{line}: {e}"))
    }

    #[test]
    fn reads_every_field_with_shared_and_master() {
        let m = one("36 35 98:0 /mnt1 /mnt2 rw,noatime shared:1 master:2 - ext3 /dev/root rw,errors=continue");
        assert_eq!(
            m,
            Mount {
                mount_id: 36,
                parent_id: 35,
                major: 98,
                minor: 0,
                root: "/mnt1".into(),
                mount_point: "/mnt2".into(),
                mount_options: vec!["rw".into(), "noatime".into()],
                optional_fields: vec![OptionalField::Shared(1), OptionalField::Master(2)],
                fs_type: "ext3".into(),
                source: "/dev/root".into(),
                super_options: vec!["rw".into(), "errors=continue".into()],
            }
        );
    }

    #[test]
    fn reads_a_line_without_optional_fields() {
        let m = one("100 99 0:50 / /run/b rw,relatime - overlay overlay rw,lowerdir=/l1:/l2");
        assert!(m.optional_fields.is_empty());
        assert_eq!(m.fs_type, "overlay");
        assert_eq!(m.super_options[1], "lowerdir=/l1:/l2");
    }

    #[test]
    fn decodes_a_mount_point_with_a_space_and_a_root_with_a_backslash() {
        let m = one(r"31 23 0:28 /a\134b /run/my\040root ro shared:9 - tmpfs tmpfs ro,mode=755");
        assert_eq!(m.mount_point, Path::new("/run/my root"));
        assert_eq!(m.root, Path::new(r"/a\b"));
    }

    #[test]
    fn keeps_non_utf8_bytes_of_a_mount_point() {
        let m = parse_line(b"1 0 0:1 / /x\xff\\011y rw - tmpfs none rw").expect("parsed");
        use std::os::unix::ffi::OsStrExt;
        assert_eq!(m.mount_point.as_os_str().as_bytes(), b"/x\xff\ty");
    }

    #[test]
    fn reads_the_real_cgroup_and_namespace_lines() {
        let m = one("36 31 0:33 / /sys/fs/cgroup/devices rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,devices");
        assert!(m.has_super_option("devices"));
        assert!(!m.has_super_option("dev"));
        let m = one("512 30 0:4 net:[4026531840] /run/netns/a rw shared:7 - nsfs nsfs rw");
        assert_eq!(m.root, Path::new("net:[4026531840]"));
        let m = one("40 22 0:36 / /mnt/empty rw propagate_from:3 unbindable - tmpfs  rw");
        assert_eq!(m.source, "");
        assert_eq!(
            m.optional_fields,
            [OptionalField::PropagateFrom(3), OptionalField::Unbindable]
        );
    }

    #[test]
    fn names_what_is_wrong() {
        let cases: &[(&str, Malformed)] = &[
            ("", Malformed::NotANumber(Field::MountId)),
            ("1 2 3", Malformed::NotANumber(Field::Device)),
            ("1 2 0:1 / /x rw", Malformed::NoSeparator),
            ("1 2 0:1 / /x", Malformed::Missing(Field::MountOptions)),
            (
                "x 2 0:1 / /x rw - t s o",
                Malformed::NotANumber(Field::MountId),
            ),
            (
                "1 -2 0:1 / /x rw - t s o",
                Malformed::NotANumber(Field::ParentId),
            ),
            (
                "1 2 0:99999999999 / /x rw - t s o",
                Malformed::NotANumber(Field::Device),
            ),
            (
                "1 2 0:1 / /x rw - cgroup cgroup",
                Malformed::Missing(Field::SuperOptions),
            ),
            ("1 2 0:1 / /x rw -", Malformed::Missing(Field::FsType)),
        ];
        for (line, reason) in cases {
            assert_eq!(parse_line(line.as_bytes()), Err(*reason), "{line:?}");
        }
        let many = format!("1 2 0:1 / /x rw {}- t s o", "shared:1 ".repeat(65));
        assert_eq!(
            parse_line(many.as_bytes()),
            Err(Malformed::TooManyOptionalFields)
        );
        let long = vec![b'1'; MAX_LINE_LEN + 1];
        assert_eq!(parse_line(&long), Err(Malformed::TooLong));
    }

    #[test]
    fn a_file_names_the_line_of_each_error_and_skips_empty_lines() {
        let text = b"22 1 0:21 / /proc rw - proc proc rw\n\ngarbage\n23 1 0:22 / /x rw - t s o\n";
        let got: Vec<_> = parse(text).collect();
        assert_eq!(got.len(), 3);
        assert_eq!(got[0].as_ref().map(|m| m.mount_id), Ok(22));
        let err = got[1].as_ref().expect_err("garbage");
        assert_eq!(err.line(), 3);
        assert_eq!(err.text(), "garbage");
        assert_eq!(
            err.to_string(),
            r#"mountinfo line 3: the mount id field is not a number: "garbage""#
        );
        assert_eq!(got[2].as_ref().map(|m| m.mount_id), Ok(23));
    }

    #[test]
    fn an_error_quotes_a_long_line_only_in_part() {
        let line = vec![b'x'; 5000];
        let err = parse(&line).next().expect("a line").expect_err("garbage");
        assert!(err.text().len() < 600 && err.text().ends_with('…'));
    }
}
