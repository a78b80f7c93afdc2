//! Discovery against simulated nodes made with mknod in a temp dev root (needs root).

use devinject_testkit::nodes::mknod_char;
use std::path::Path;

use devinject_devices::{HostRoots, Profile};
use devinject_discovery::{discover, profile_file};

/// Whether the test can make nodes: root. Otherwise prints why it is skipped, or fails under
/// `CI=true`.
fn can_mknod() -> bool {
    devinject_testkit::require_root()
}

/// The roots of a simulated host in `dir`: its `dev`, `sys`, `proc` and `driver`.
fn roots_under(dir: &Path) -> HostRoots {
    HostRoots {
        dev_root: dir.join("dev"),
        sys_root: dir.join("sys"),
        proc_root: dir.join("proc"),
        driver_root: dir.join("driver"),
    }
}

#[test]
fn finds_sim_devices_ids_numa_and_control_nodes() {
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dev = t.path().join("dev");
    let sys = t.path().join("sys");
    std::fs::create_dir_all(dev.join("sim")).unwrap();
    for i in [0u32, 1, 2, 10] {
        mknod_char(&dev.join(format!("sim/accel{i}")), 1, 3);
        let d = sys.join(format!("class/sim/accel{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("serial"), format!("SN-{i}\n")).unwrap();
        std::fs::write(d.join("numa_node"), if i == 10 { "-1\n" } else { "1\n" }).unwrap();
        std::fs::write(
            d.join("vendor"),
            if i == 2 { "0xdead\n" } else { "0x1234\n" },
        )
        .unwrap();
        // accel0 has a model too long to publish, accel1 none at all.
        match i {
            0 => std::fs::write(d.join("model"), format!("{}\n", "m".repeat(65))).unwrap(),
            1 => {}
            _ => std::fs::write(d.join("model"), "Sim 9000\n").unwrap(),
        }
    }
    std::fs::write(dev.join("sim/accel-readme"), "not a node").unwrap();
    mknod_char(&dev.join("sim/ctl"), 1, 5);
    let profile = Profile::parse(
        r#"
name = "sim"
resource = "devinject.io/sim"
[discovery]
nodes = ["sim/accel*"]
id = "sysfs"
id_sysfs = "class/sim/{name}/serial"
numa_sysfs = "class/sim/{name}/numa_node"
[discovery.require_sysfs]
"class/sim/{name}/vendor" = "0x1234"
[discovery.attributes_sysfs]
vendor = "class/sim/{name}/vendor"
model = "class/sim/{name}/model"
[[control_nodes]]
path = "sim/ctl"
[[control_nodes]]
path = "sim/optional"
optional = true
"#,
        Path::new("sim.toml"),
    )
    .unwrap();
    let roots = HostRoots {
        dev_root: dev.clone(),
        sys_root: sys,
        proc_root: "/proc".into(),
        driver_root: "/".into(),
    };
    let inv = discover(&profile, &roots).unwrap();
    let ids: Vec<_> = inv.devices.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(
        ids,
        ["SN-0", "SN-1", "SN-10"],
        "natural order, vendor filter, readme skipped"
    );
    assert_eq!(inv.devices[0].numa_node, Some(1));
    assert_eq!(inv.devices[2].numa_node, None);
    let attributes = |i: usize| {
        inv.devices[i]
            .attributes
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
    };
    assert_eq!(
        attributes(0),
        ["vendor=0x1234"],
        "a 65-byte model is left out"
    );
    assert_eq!(
        attributes(1),
        ["vendor=0x1234"],
        "a missing model is left out"
    );
    assert_eq!(attributes(2), ["model=Sim 9000", "vendor=0x1234"]);
    assert_eq!(inv.devices[2].index, 2);
    assert_eq!(inv.control_nodes.len(), 1);
    assert_eq!(
        inv.control_nodes[0].container_path,
        Path::new("/dev/sim/ctl")
    );
    assert_eq!(
        (inv.control_nodes[0].major, inv.control_nodes[0].minor),
        (1, 5)
    );

    // A required control node that is missing names itself.
    let strict = Profile::parse(
        "name = \"sim\"\nresource = \"devinject.io/sim\"\n[discovery]\nnodes = [\"sim/accel*\"]\n[[control_nodes]]\npath = \"sim/gone\"\n",
        Path::new("sim.toml"),
    )
    .unwrap();
    let err = discover(&strict, &roots).unwrap_err().to_string();
    assert!(err.contains("sim/gone") && err.contains("missing"), "{err}");
}

/// Regression: with `id = "index"`, removing a middle node renumbered the devices after it, so
/// the plugin marked the wrong id unhealthy and the hook picked the wrong device.
#[test]
fn index_ids_survive_removal_of_a_middle_device() {
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let dev = t.path().join("dev");
    std::fs::create_dir_all(dev.join("sim")).unwrap();
    for i in 0..3u32 {
        mknod_char(&dev.join(format!("sim/accel{i}")), 240, i);
    }
    let profile = Profile::parse(
        "name = \"sim\"\nresource = \"devinject.io/sim\"\n[discovery]\nnodes = [\"sim/accel*\"]\n",
        Path::new("sim.toml"),
    )
    .unwrap();
    let roots = HostRoots {
        dev_root: dev.clone(),
        sys_root: t.path().join("sys"),
        proc_root: t.path().join("proc"),
        driver_root: "/".into(),
    };
    std::fs::remove_file(dev.join("sim/accel1")).unwrap();
    let inv = discover(&profile, &roots).unwrap();
    let ids: Vec<_> = inv.devices.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(ids, ["0", "2"]);
    assert_eq!(inv.devices[1].nodes[0].minor, 2, "id 2 is still accel2");
}

/// NVIDIA's `/proc/driver/nvidia/gpus/<bus>/information`, shortened to the lines aliases use.
fn information(uuid: &str, bus: &str, minor: u32) -> String {
    format!("Model: \t\t NVIDIA H100\nGPU UUID: \t {uuid}\nBus Location: \t {bus}\nDevice Minor: \t {minor}\n")
}

#[test]
fn aliases_from_the_drivers_information_files_name_their_device_only() {
    use devinject_devices::{Request, Resolve};
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dev, proc) = (t.path().join("dev"), t.path().join("proc"));
    std::fs::create_dir_all(&dev).unwrap();
    for (minor, uuid, bus) in [
        (
            0,
            "GPU-aaaaaaaa-0000-0000-0000-000000000000",
            "0000:1a:00.0",
        ),
        (
            1,
            "GPU-bbbbbbbb-0000-0000-0000-000000000000",
            "0000:1b:00.0",
        ),
        // A third file claims device 1's UUID: that alias names two devices, and is dropped.
        (
            2,
            "GPU-bbbbbbbb-0000-0000-0000-000000000000",
            "0000:1c:00.0",
        ),
    ] {
        mknod_char(&dev.join(format!("nvidia{minor}")), 195, minor);
        let d = proc.join(format!("driver/nvidia/gpus/{bus}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("information"), information(uuid, bus, minor)).unwrap();
    }
    let roots = HostRoots {
        dev_root: dev,
        sys_root: t.path().join("sys"),
        proc_root: proc,
        driver_root: "/".into(),
    };
    let profile = |id: &str| {
        Profile::parse(
            &format!(
                "name = \"nvidia\"\nresource = \"nvidia.com/gpu\"\n[discovery]\nnodes = [\"nvidia[0-9]*\"]\nid = {id:?}\n\
                 [discovery.aliases]\nfiles = \"driver/nvidia/gpus/*/information\"\ndevice_key = \"Device Minor\"\nkeys = [\"GPU UUID\", \"Bus Location\"]\n"
            ),
            Path::new("nvidia.toml"),
        )
        .unwrap()
    };
    let inv = discover(&profile("index"), &roots).unwrap();
    let names = |i: usize| -> Vec<String> {
        let d = &inv.devices[i];
        std::iter::once(&d.id)
            .chain(&d.aliases)
            .map(|a| a.to_string())
            .collect()
    };
    assert_eq!(
        names(0),
        [
            "0",
            "GPU-aaaaaaaa-0000-0000-0000-000000000000",
            "0000:1a:00.0"
        ]
    );
    assert_eq!(
        names(1),
        ["1", "0000:1b:00.0"],
        "the UUID two files claim is nobody's"
    );
    assert_eq!(names(2), ["2", "0000:1c:00.0"]);
    let select = |req: &str| {
        Request::parse(Some(req))
            .unwrap()
            .select(&inv.devices, 1, Resolve::Granted)
            .map(|s| s.indices)
    };
    assert_eq!(
        select("GPU-aaaaaaaa-0000-0000-0000-000000000000,0000:1c:00.0").unwrap(),
        [0, 2]
    );
    assert!(select("GPU-bbbbbbbb-0000-0000-0000-000000000000").is_err());
    assert!(select("0,0000:1a:00.0").is_err(), "one device named twice");

    // `id = "alias"`: the device plugin advertises the UUID; two devices with one UUID are
    // both withdrawn, each naming the other, and the third is served.
    let inv = discover(&profile("alias"), &roots).unwrap();
    let ids: Vec<_> = inv.devices.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(ids, ["GPU-aaaaaaaa-0000-0000-0000-000000000000"]);
    let withdrawn: Vec<_> = inv.withdrawn.iter().map(|w| w.node.clone()).collect();
    assert_eq!(withdrawn.len(), 2, "{:?}", inv.withdrawn);
    for w in &inv.withdrawn {
        assert!(
            w.problem.contains("nvidia1") && w.problem.contains("nvidia2"),
            "{}",
            w.problem
        );
    }
    std::fs::write(
        roots
            .proc_root
            .join("driver/nvidia/gpus/0000:1c:00.0/information"),
        information(
            "GPU-cccccccc-0000-0000-0000-000000000000",
            "0000:1c:00.0",
            2,
        ),
    )
    .unwrap();
    let inv = discover(&profile("alias"), &roots).unwrap();
    let ids: Vec<_> = inv.devices.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(ids[0], "GPU-aaaaaaaa-0000-0000-0000-000000000000");
    assert_eq!(inv.devices[0].aliases.len(), 1);
}

/// A USB device `number` (`189:<minor>`) at `port` below the host controller, with its ids.
fn usb_device(sys: &Path, number: &str, port: &str, vendor: &str, product: &str) {
    let dir = sys.join("devices/pci0000:00/0000:00:14.0/usb2").join(port);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("idVendor"), format!("{vendor}\n")).unwrap();
    std::fs::write(dir.join("idProduct"), format!("{product}\n")).unwrap();
    std::fs::create_dir_all(sys.join("dev/char")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:00:14.0/usb2/{port}"),
        sys.join("dev/char").join(number),
    )
    .unwrap();
}

/// The shipped coral-usb profile on a simulated USB bus with the kernel's numbers (usb_device
/// is char major 189, minor `(bus - 1) * 128 + devnum - 1`): the accelerator before its
/// firmware (`1a6e:089a` at 002/003) is a device, a keyboard beside it is not, and its id is its
/// port. Re-enumerated after its firmware loaded (`18d1:9302` at 002/004, the old node gone),
/// it is the same device with its new node; unplugged, it is gone.
#[test]
fn the_coral_usb_profile_follows_its_device_through_re_enumeration() {
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dev, sys) = (t.path().join("dev"), t.path().join("sys"));
    std::fs::create_dir_all(dev.join("bus/usb/002")).unwrap();
    mknod_char(&dev.join("bus/usb/002/003"), 189, 130);
    usb_device(&sys, "189:130", "2-1", "1a6e", "089a");
    mknod_char(&dev.join("bus/usb/002/005"), 189, 132);
    usb_device(&sys, "189:132", "2-2", "046d", "c31c");
    let shipped = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../../profiles/coral-usb.toml");
    let profile = profile_file::load(&shipped).unwrap();
    let roots = roots_under(t.path());
    let found = |roots: &HostRoots| -> Vec<(String, String)> {
        discover(&profile, roots)
            .unwrap()
            .devices
            .iter()
            .map(|d| {
                (
                    d.id.as_str().to_owned(),
                    d.nodes[0].host_path.display().to_string(),
                )
            })
            .collect()
    };
    let at = |n: &str| dev.join("bus/usb/002").join(n).display().to_string();
    assert_eq!(found(&roots), [("2-1".to_owned(), at("003"))]);

    // Firmware loaded: the device leaves and comes back as Google's, one number further.
    std::fs::remove_file(dev.join("bus/usb/002/003")).unwrap();
    std::fs::remove_file(sys.join("dev/char/189:130")).unwrap();
    std::fs::remove_dir_all(sys.join("devices/pci0000:00/0000:00:14.0/usb2/2-1")).unwrap();
    mknod_char(&dev.join("bus/usb/002/004"), 189, 131);
    usb_device(&sys, "189:131", "2-1", "18d1", "9302");
    assert_eq!(found(&roots), [("2-1".to_owned(), at("004"))]);

    std::fs::remove_file(dev.join("bus/usb/002/004")).unwrap();
    assert_eq!(found(&roots), []);
}

/// One bad device never fails another: of four devices, one whose id attribute cannot be read
/// and one whose per-device node is missing are withdrawn, each with its own problem; one whose
/// node was replaced by a FIFO is no device; the fourth is served.
#[test]
fn a_device_that_cannot_be_read_is_withdrawn_alone() {
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dev, sys) = (t.path().join("dev"), t.path().join("sys"));
    std::fs::create_dir_all(dev.join("sim")).unwrap();
    for i in 0..4u32 {
        let d = sys.join(format!("class/sim/accel{i}"));
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("serial"), format!("SN-{i}\n")).unwrap();
        if i != 2 {
            mknod_char(&dev.join(format!("sim/accel{i}")), 1, 3);
        }
        if i != 3 {
            mknod_char(&dev.join(format!("sim/dma{i}")), 1, 5);
        }
    }
    // accel1's id cannot be read; accel2 is a FIFO; accel3 lacks its dma node.
    std::fs::remove_file(sys.join("class/sim/accel1/serial")).unwrap();
    nix::unistd::mkfifo(&dev.join("sim/accel2"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let profile = Profile::parse(
        r#"
name = "sim"
resource = "devinject.io/sim"
[discovery]
nodes = ["sim/accel*"]
id = "sysfs"
id_sysfs = "class/sim/{name}/serial"
[[device_nodes]]
path = "sim/dma{n}"
"#,
        Path::new("sim.toml"),
    )
    .unwrap();
    let roots = roots_under(t.path());
    let inv = discover(&profile, &roots).unwrap();
    let ids: Vec<_> = inv.devices.iter().map(|d| d.id.to_string()).collect();
    assert_eq!(ids, ["SN-0"]);
    assert_eq!(inv.devices[0].index, 0);
    let withdrawn: Vec<_> = inv
        .withdrawn
        .iter()
        .map(|w| (w.node.clone(), w.problem.clone()))
        .collect();
    assert_eq!(withdrawn.len(), 2, "{withdrawn:?}");
    assert_eq!(withdrawn[0].0, dev.join("sim/accel1"));
    assert!(
        withdrawn[0].1.contains("class/sim/accel1/serial"),
        "{}",
        withdrawn[0].1
    );
    assert_eq!(withdrawn[1].0, dev.join("sim/accel3"));
    assert!(withdrawn[1].1.contains("sim/dma3"), "{}", withdrawn[1].1);
}

/// An FTDI serial adapter at USB `port` with `serial`, whose tty `tty` (char 188:`minor`) sits
/// below its first interface, as the kernel lays it out.
fn ftdi_adapter(sys: &Path, port: &str, serial: &str, tty: &str, minor: u32) {
    let dir = sys.join("devices/pci0000:00/0000:00:14.0/usb2").join(port);
    let node_dir = dir.join(format!("{port}:1.0/{tty}/tty/{tty}"));
    std::fs::create_dir_all(&node_dir).unwrap();
    for (attr, value) in [
        ("idVendor", "0403"),
        ("idProduct", "6001"),
        ("serial", serial),
    ] {
        std::fs::write(dir.join(attr), format!("{value}\n")).unwrap();
    }
    std::fs::create_dir_all(sys.join("dev/char")).unwrap();
    std::os::unix::fs::symlink(
        format!("../../devices/pci0000:00/0000:00:14.0/usb2/{port}/{port}:1.0/{tty}/tty/{tty}"),
        sys.join("dev/char").join(format!("188:{minor}")),
    )
    .unwrap();
}

/// A serial adapter chosen by its USB ids and serial gets, besides its tty, the stable links
/// udev made for it (`/dev/serial/by-id/...`), each as a node of the tty's numbers at the
/// link's path; another adapter's links, a link to nothing, and a file that is no link are
/// not given. Unplugged, the device and its links are gone.
#[test]
fn a_serial_adapter_comes_with_its_stable_links() {
    if !can_mknod() {
        return;
    }
    let t = tempfile::tempdir().unwrap();
    let (dev, sys) = (t.path().join("dev"), t.path().join("sys"));
    let by_id = dev.join("serial/by-id");
    std::fs::create_dir_all(&by_id).unwrap();
    std::fs::create_dir_all(dev.join("serial/by-path")).unwrap();
    for (port, serial, tty, minor) in [
        ("2-3", "A50285BI", "ttyUSB0", 0),
        ("2-4", "B7", "ttyUSB1", 1),
    ] {
        mknod_char(&dev.join(tty), 188, minor);
        ftdi_adapter(&sys, port, serial, tty, minor);
        std::os::unix::fs::symlink(
            format!("../../{tty}"),
            by_id.join(format!("usb-FTDI_FT232R_USB_UART_{serial}-if00-port0")),
        )
        .unwrap();
    }
    std::os::unix::fs::symlink(
        "../../ttyUSB0",
        dev.join("serial/by-path/pci-0000:00:14.0-usb-0:3:1.0-port0"),
    )
    .unwrap();
    std::os::unix::fs::symlink("../../ttyUSB9", by_id.join("usb-gone-if00-port0")).unwrap();
    std::fs::write(by_id.join("README"), "not a link\n").unwrap();
    let profile = Profile::parse(
        "name = \"ftdi\"\nresource = \"example.com/ftdi\"\n[discovery]\nnodes = [\"ttyUSB*\"]\n\
         links = [\"serial/by-id/*\", \"serial/by-path/*\"]\nid = \"bus\"\n\
         [[discovery.usb]]\nvendor = \"0403\"\nproduct = \"6001\"\nserial = \"A50285BI\"\n",
        Path::new("ftdi.toml"),
    )
    .unwrap();
    let roots = roots_under(t.path());
    let inv = discover(&profile, &roots).unwrap();
    assert_eq!(inv.devices.len(), 1, "{:?}", inv.devices);
    let nodes: Vec<(String, u32, u32)> = inv.devices[0]
        .nodes
        .iter()
        .map(|n| (n.container_path.display().to_string(), n.major, n.minor))
        .collect();
    assert_eq!(
        nodes,
        [
            ("/dev/ttyUSB0".to_owned(), 188, 0),
            (
                "/dev/serial/by-id/usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0".to_owned(),
                188,
                0
            ),
            (
                "/dev/serial/by-path/pci-0000:00:14.0-usb-0:3:1.0-port0".to_owned(),
                188,
                0
            ),
        ]
    );

    // Unplugged: udev removes the tty and its links.
    std::fs::remove_file(dev.join("ttyUSB0")).unwrap();
    std::fs::remove_file(by_id.join("usb-FTDI_FT232R_USB_UART_A50285BI-if00-port0")).unwrap();
    assert!(discover(&profile, &roots).unwrap().devices.is_empty());
}
