//! The taints the driver puts on a published device (KEP-5055, device taints and tolerations,
//! the `DRADeviceTaints` feature): `<driver>/unhealthy` on a device its health attribute calls
//! unhealthy, with the effect the profile names, and `<driver>/prepare-failed` on one whose
//! prepare step failed before binding, and `<driver>/device-plugin` on one a running container
//! holds through devinject's device plugin ([`crate::plugin_holds`]). The scheduler allocates a tainted device only to a claim
//! that tolerates the taint, and the driver prepares an unhealthy one only for such a claim
//! (docs/dra.md, "Health").

use devinject_devices::Profile;
use k8s_openapi::api::resource::v1::DeviceTaint;

/// The taint key of an unhealthy device, below the driver's name: `<driver>/unhealthy`.
pub const UNHEALTHY_TAINT: &str = "unhealthy";
/// The taint value of an unhealthy device: the profile key whose attribute told it.
pub const UNHEALTHY_TAINT_VALUE: &str = "health_sysfs";
/// The taint key of a device whose prepare step failed before binding, below the driver's
/// name: `<driver>/prepare-failed` (effect `NoSchedule`).
pub const PREPARE_FAILED_TAINT: &str = "prepare-failed";
/// The taint key of a device a running container holds through the device plugin, below the
/// driver's name: `<driver>/device-plugin` (effect `NoSchedule`), its value the holding pod.
pub const PLUGIN_HELD_TAINT: &str = "device-plugin";

/// The taint an unhealthy device of `profile` carries in `driver`'s slices: key
/// `<driver>/unhealthy`, value `health_sysfs`, the profile's `discovery.health_taint` effect.
pub fn unhealthy_taint(driver: &str, profile: &Profile) -> DeviceTaint {
    DeviceTaint {
        key: format!("{driver}/{UNHEALTHY_TAINT}"),
        value: Some(UNHEALTHY_TAINT_VALUE.to_owned()),
        effect: profile
            .discovery
            .health_taint
            .unwrap_or_default()
            .as_str()
            .to_owned(),
        time_added: None,
    }
}

/// The taint a device whose prepare step failed before binding carries in `driver`'s slices:
/// key `<driver>/prepare-failed`, effect `NoSchedule` (the pods holding it keep it).
pub fn prepare_failed_taint(driver: &str) -> DeviceTaint {
    DeviceTaint {
        key: format!("{driver}/{PREPARE_FAILED_TAINT}"),
        value: None,
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

/// The taint a device held through the device plugin by pod `holder` (`<namespace>/<pod>`)
/// carries in `driver`'s slices: key `<driver>/device-plugin`, effect `NoSchedule` (the pods
/// holding it through a claim, tolerating it, keep it). The value names the pod, cut to the
/// 63 characters a taint value may have.
pub fn plugin_held_taint(driver: &str, holder: &str) -> DeviceTaint {
    let value: String = holder
        .chars()
        .map(|c| if c == '/' { '.' } else { c })
        .take(63)
        .collect();
    DeviceTaint {
        key: format!("{driver}/{PLUGIN_HELD_TAINT}"),
        value: Some(value.trim_end_matches(['.', '-', '_']).to_owned()).filter(|v| !v.is_empty()),
        effect: "NoSchedule".to_owned(),
        time_added: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slices::fixtures::profile;
    use std::path::Path;

    #[test]
    fn an_unhealthy_devices_taint_is_the_drivers_and_keeps_new_claims_off_by_default() {
        assert_eq!(
            unhealthy_taint("example.com", &profile()),
            DeviceTaint {
                key: "example.com/unhealthy".into(),
                value: Some("health_sysfs".into()),
                effect: "NoSchedule".into(),
                time_added: None,
            }
        );
    }

    #[test]
    fn a_profile_that_evicts_taints_its_unhealthy_devices_no_execute() {
        let evicting = Profile::parse(
            "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel[0-9]*\"]\n\
             health_sysfs = \"class/demo/{name}/health\"\nhealth_taint = \"NoExecute\"\n",
            Path::new("demo.toml"),
        )
        .unwrap();
        let taint = unhealthy_taint("devinject.io", &evicting);
        assert_eq!(taint.effect, "NoExecute");
        assert_eq!(taint.key, "devinject.io/unhealthy");
    }

    #[test]
    fn a_failed_prepares_taint_has_its_own_key_no_value_and_keeps_new_claims_off() {
        let taint = prepare_failed_taint("devinject.io");
        assert_eq!(
            taint,
            DeviceTaint {
                key: "devinject.io/prepare-failed".into(),
                value: None,
                effect: "NoSchedule".into(),
                time_added: None,
            }
        );
        // A claim that tolerates one of the two taints does not tolerate the other.
        let tolerates_unhealthy = crate::claim::Toleration {
            key: Some("devinject.io/unhealthy".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(tolerates_unhealthy.tolerates(&unhealthy_taint("devinject.io", &profile())));
        assert!(!tolerates_unhealthy.tolerates(&taint));
    }

    #[test]
    fn a_held_devices_taint_names_its_pod_as_a_label_value_and_keeps_new_claims_off() {
        let taint = plugin_held_taint("devinject.io", "team/trainer-0");
        assert_eq!(taint.key, "devinject.io/device-plugin");
        assert_eq!(taint.value.as_deref(), Some("team.trainer-0"));
        assert_eq!(taint.effect, "NoSchedule");
        let long = format!("{}/{}", "n".repeat(40), "p".repeat(40));
        let value = plugin_held_taint("d", &long).value.unwrap();
        assert_eq!(value.len(), 63);
        assert!(!value.ends_with('.'));
        let tolerates_any_holder = crate::claim::Toleration {
            key: Some("devinject.io/device-plugin".into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        assert!(tolerates_any_holder.tolerates(&taint));
        assert!(!tolerates_any_holder.tolerates(&prepare_failed_taint("devinject.io")));
    }
}
