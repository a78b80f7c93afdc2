//! A shared device's consumable capacity (KEP-5075, the `DRAConsumableCapacity` feature): a
//! device of a profile with `[capacity]` is published once with `allowMultipleAllocations`, and
//! its capacity says how much there is and how much one claim takes unless its request asks
//! for more; the scheduler allocates the device to claims until the capacity is used up.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    CapacityRequestPolicy, CapacityRequestPolicyRange, DeviceCapacity,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

/// A device's capacity as `[capacity]` states it: its value, what a claim that asks for no
/// amount takes (the default), and the range a request is rounded up into: from one step, in
/// steps, up to all of it (no `max`: the value bounds it). Fractional amounts are written in
/// thousandths (`250m`), which Kubernetes 1.37 computes with (`DRAFractionalCapacityRange`).
pub(super) fn device_capacity(
    capacity: &devinject_devices::Capacity,
) -> BTreeMap<String, DeviceCapacity> {
    let quantity = |amount: devinject_devices::Amount| Quantity(amount.to_string());
    BTreeMap::from([(
        capacity.name.clone(),
        DeviceCapacity {
            value: quantity(capacity.value),
            request_policy: Some(CapacityRequestPolicy {
                default: Some(quantity(capacity.default)),
                valid_range: Some(CapacityRequestPolicyRange {
                    min: quantity(capacity.step),
                    step: Some(quantity(capacity.step)),
                    max: None,
                }),
                valid_values: None,
            }),
        },
    )])
}

#[cfg(test)]
mod tests {
    use super::*;
    use devinject_devices::Profile;
    use std::path::Path;

    fn capacity(text: &str) -> devinject_devices::Capacity {
        Profile::parse(
            &format!(
                "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n{text}"
            ),
            Path::new("demo.toml"),
        )
        .unwrap()
        .capacity
        .unwrap()
    }

    #[test]
    fn a_device_holds_its_capacity_under_the_profiles_name_for_it() {
        let published = device_capacity(&capacity("[capacity]\npods = 3\n"));
        let found: Vec<(&str, &str)> = published
            .iter()
            .map(|(k, v)| (k.as_str(), v.value.0.as_str()))
            .collect();
        assert_eq!(found, [("pods", "3")]);
        let other = device_capacity(&capacity("[capacity]\nsessions = 12\n"));
        assert_eq!(other["sessions"].value.0, "12");
    }

    #[test]
    fn a_fractional_step_is_published_in_thousandths_as_the_range_and_the_default() {
        let published = device_capacity(&capacity(
            "[capacity.share]\nvalue = 1.5\nstep = 0.25\ndefault = 0.5\n",
        ));
        let share = &published["share"];
        assert_eq!(share.value.0, "1500m");
        let policy = share.request_policy.as_ref().unwrap();
        assert_eq!(policy.default.as_ref().map(|q| q.0.as_str()), Some("500m"));
        let range = policy.valid_range.as_ref().unwrap();
        assert_eq!(range.min.0, "250m");
        assert_eq!(range.step.as_ref().map(|q| q.0.as_str()), Some("250m"));
        assert_eq!(range.max, None);
    }

    #[test]
    fn a_claim_takes_one_unit_unless_it_asks_for_more_in_whole_units_up_to_all() {
        let published = device_capacity(&capacity("[capacity]\npods = 3\n"));
        let policy = published["pods"].request_policy.as_ref().unwrap();
        assert_eq!(policy.default.as_ref().map(|q| q.0.as_str()), Some("1"));
        let range = policy.valid_range.as_ref().unwrap();
        assert_eq!(range.min.0, "1");
        assert_eq!(range.step.as_ref().map(|q| q.0.as_str()), Some("1"));
        assert_eq!(range.max, None, "bounded by the capacity itself");
        assert_eq!(policy.valid_values, None);
    }
}
