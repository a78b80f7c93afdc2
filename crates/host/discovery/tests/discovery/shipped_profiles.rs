//! Every profile shipped in `profiles/` loads, and they do not collide.

use std::path::Path;

use devinject_discovery::profile_dir;

#[test]
fn shipped_profiles_load() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles");
    let set = profile_dir::load(&dir).unwrap();
    let names: Vec<_> = set.iter().map(|p| p.name.to_string()).collect();
    for want in [
        "amd",
        "coral-edgetpu",
        "coral-usb",
        "demo",
        "fuse",
        "intel-fpga",
        "intel-gpu",
        "kvm",
        "nvidia",
        "nvidia-jetson",
        "tun",
    ] {
        assert!(
            names.iter().any(|n| n == want),
            "missing profile {want}: {names:?}"
        );
    }
    assert_eq!(
        set.get("nvidia").unwrap().request_env(),
        "NVIDIA_VISIBLE_DEVICES"
    );
    assert_eq!(
        set.get("coral-edgetpu").unwrap().request_env(),
        "CORAL_EDGETPU_VISIBLE_DEVICES"
    );
    assert_eq!(
        set.get("nvidia-jetson").unwrap().request_env(),
        "NVIDIA_JETSON_VISIBLE_DEVICES"
    );
}

#[test]
fn real_kernel_devices_are_discovered() {
    use devinject_devices::HostRoots;
    use devinject_discovery::discover;
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles");
    let set = profile_dir::load(&dir).unwrap();
    // /dev/null is not in any profile, but /dev/fuse and /dev/net/tun exist on any Linux host
    // with those modules; skip with a reason where they do not.
    for (name, path, major, minor) in [
        ("fuse", "/dev/fuse", 10, 229),
        ("tun", "/dev/net/tun", 10, 200),
    ] {
        if !devinject_testkit::require_path(path, &format!("the {name} module's node")) {
            continue;
        }
        let inv = discover(set.get(name).unwrap(), &HostRoots::default()).unwrap();
        assert_eq!(inv.devices.len(), 1, "{name}");
        let n = &inv.devices[0].nodes[0];
        assert_eq!((n.major, n.minor), (major, minor), "{name}");
        assert_eq!(n.container_path, Path::new(path));
    }
}
