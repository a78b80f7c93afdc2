//! The demo profile with one device, a control node and one library, as plain values: what
//! `cdi::build_spec` is given by tests that need no simulated host.

use std::path::{Path, PathBuf};

use devinject_devices::driver_files::DriverLibrary;
use devinject_devices::{
    Device, DeviceId, DeviceKind, DeviceNode, DriverFiles, Inventory, Profile,
};

/// What `cdi::build_spec` takes besides the request.
pub struct DemoValues {
    /// The demo profile, with one env variable.
    pub profile: Profile,
    /// `accel0` (10:1) and the control node `ctl` (10:2), mode 0660, gid 44.
    pub inventory: Inventory,
    /// `libdemo.so.1.0.0` (soname `libdemo.so.1`) in `/usr/lib`.
    pub files: DriverFiles,
}

/// The demo values with every host path below `root` (`""` for the host's own paths).
pub fn demo_values(root: &str) -> DemoValues {
    let profile = Profile::parse(
        "name = \"demo\"\nresource = \"devinject.io/demo\"\n[discovery]\nnodes = [\"demo/accel*\"]\n[env]\nDEMO_DRIVER = \"1\"\n",
        Path::new("demo.toml"),
    )
    .expect("profile");
    let node = |name: &str, minor| DeviceNode {
        host_path: PathBuf::from(format!("{root}/dev/demo/{name}")),
        container_path: PathBuf::from(format!("/dev/demo/{name}")),
        kind: DeviceKind::Char,
        major: 10,
        minor,
        mode: 0o660,
        uid: 0,
        gid: 44,
    };
    let inventory = Inventory {
        withdrawn: Vec::new(),
        devices: vec![Device {
            id: DeviceId::new("gpu-a").expect("id"),
            index: 0,
            name: "accel0".into(),
            nodes: vec![node("accel0", 1)],
            numa_node: None,
            healthy: true,
            attributes: Default::default(),
            aliases: Vec::new(),
        }],
        control_nodes: vec![node("ctl", 2)],
    };
    let files = DriverFiles {
        libraries: vec![DriverLibrary {
            path: PathBuf::from(format!("{root}/usr/lib/libdemo.so.1.0.0")),
            file_name: "libdemo.so.1.0.0".into(),
            soname: Some("libdemo.so.1".into()),
            capability: None,
            links: Vec::new(),
        }],
        binaries: Vec::new(),
        files: Vec::new(),
    };
    DemoValues {
        profile,
        inventory,
        files,
    }
}
