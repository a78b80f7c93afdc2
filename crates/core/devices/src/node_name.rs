//! A device node's name and the profile templates it fills: a profile names a device's sysfs
//! attributes and per-device nodes with `{name}` (the node's file name, `accel2`) and `{n}` (the
//! number ending it, `2`), which discovery and the health reads fill in alike.

/// The number at the end of a node name (`accel12` → 12).
pub fn trailing_number(name: &str) -> Option<u64> {
    let digits: String = name
        .chars()
        .rev()
        .take_while(char::is_ascii_digit)
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    digits.parse().ok()
}

/// `template` with `{name}` (the node's file name) and `{n}` (its trailing number) filled in.
pub fn substitute(template: &str, name: &str, n: Option<u64>) -> String {
    let n = n.map(|n| n.to_string()).unwrap_or_default();
    template.replace("{name}", name).replace("{n}", &n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates() {
        assert_eq!(trailing_number("apex_12"), Some(12));
        assert_eq!(trailing_number("kvm"), None);
        assert_eq!(
            substitute("class/apex/{name}/n{n}", "apex_3", Some(3)),
            "class/apex/apex_3/n3"
        );
    }
}
