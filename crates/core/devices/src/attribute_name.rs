//! The names a profile gives DRA device attributes and capacities (`discovery.attributes_sysfs`,
//! `[capacity]`): C identifiers the API accepts, apart from the attributes every device
//! carries already.

/// The attributes every published device carries already: `discovery.attributes_sysfs` and
/// `[capacity]` may not reuse these names.
pub const DEVICE_ATTRIBUTES: [&str; 6] =
    ["profile", "id", "index", "numaNode", "replica", "partition"];

/// The longest attribute name (the DRA API's limit for a device attribute).
pub const MAX_ATTRIBUTE_NAME: usize = 32;

/// Why `name` cannot name a device attribute, if it cannot.
pub fn attribute_name_problem(name: &str) -> Option<String> {
    let identifier = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !identifier || name.len() > MAX_ATTRIBUTE_NAME {
        Some(format!(
            "is not a C identifier of at most {MAX_ATTRIBUTE_NAME} characters (letters, digits, `_`; not a digit first): rename it"
        ))
    } else if DEVICE_ATTRIBUTES.contains(&name) {
        Some(format!(
            "is an attribute every device carries already ({}): choose another name",
            DEVICE_ATTRIBUTES.join(", ")
        ))
    } else {
        None
    }
}
