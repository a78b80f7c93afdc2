//! Property tests: whatever bytes a path holds, escaping them by the kernel's rules and reading
//! the line back gives the same bytes; and no input makes the reader panic.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use devinject_mountinfo::{escape, parse, parse_line, unescape, OptionalField};
use proptest::prelude::*;

/// A mountinfo line as the kernel writes it, with `root`, `point` and `source` mangled.
fn line(root: &[u8], point: &[u8], fs_type: &[u8], source: &[u8]) -> Vec<u8> {
    let mut out = b"36 35 98:0 ".to_vec();
    out.extend(escape(root));
    out.push(b' ');
    out.extend(escape(point));
    out.extend_from_slice(b" rw,noatime shared:1 master:2 - ");
    out.extend(escape(fs_type));
    out.push(b' ');
    out.extend(escape(source));
    out.extend_from_slice(b" rw,errors=continue");
    out
}

proptest! {
    #[test]
    fn unescape_undoes_escape(raw in proptest::collection::vec(any::<u8>(), 0..64)) {
        prop_assert_eq!(unescape(escape(&raw)).into_vec(), raw);
    }

    #[test]
    fn escaped_fields_read_back_as_written(
        root in proptest::collection::vec(any::<u8>(), 0..48),
        point in proptest::collection::vec(any::<u8>(), 0..48),
        fs_type in proptest::collection::vec(any::<u8>(), 0..16),
        source in proptest::collection::vec(any::<u8>(), 0..32),
    ) {
        let text = line(&root, &point, &fs_type, &source);
        let mount = parse_line(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(mount.root.as_os_str(), OsStr::from_bytes(&root));
        prop_assert_eq!(mount.mount_point.as_os_str(), OsStr::from_bytes(&point));
        prop_assert_eq!(mount.fs_type.as_os_str(), OsStr::from_bytes(&fs_type));
        prop_assert_eq!(mount.source.as_os_str(), OsStr::from_bytes(&source));
        prop_assert_eq!(
            mount.optional_fields,
            vec![OptionalField::Shared(1), OptionalField::Master(2)]
        );
        // The same line inside a file, between others, is still one line.
        let mut file = b"1 0 0:1 / / rw - ext4 /dev/vda rw\n".to_vec();
        file.extend(&text);
        file.push(b'\n');
        let points: Vec<_> = parse(&file).map(|m| m.map(|m| m.mount_point)).collect();
        prop_assert_eq!(points.len(), 2);
        prop_assert_eq!(
            points[1].as_ref().map(|p| p.as_os_str().as_bytes().to_vec()),
            Ok(point)
        );
    }

    #[test]
    fn no_input_panics(text in proptest::collection::vec(any::<u8>(), 0..256)) {
        for result in parse(&text) {
            let _ = result.map_err(|e| e.to_string());
        }
        let _ = unescape(&text);
    }

    #[test]
    fn no_near_miss_of_a_line_panics(
        fields in proptest::collection::vec(
            prop_oneof![
                Just(b"-".to_vec()),
                Just(b"0:1".to_vec()),
                Just(b"12".to_vec()),
                Just(b"shared:".to_vec()),
                Just(br"\0".to_vec()),
                Just(br"\777".to_vec()),
                proptest::collection::vec(any::<u8>(), 0..6),
            ],
            0..14,
        )
    ) {
        let _ = parse_line(&fields.join(&b' '));
    }
}
