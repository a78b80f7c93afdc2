//! Request values: any string parses or fails cleanly; a parsed list round-trips; selecting
//! against a small inventory never panics and never selects a device twice.
#![no_main]

use devinject_devices::inventory::Device;
use devinject_devices::{DeviceId, Request, Resolve};
use libfuzzer_sys::fuzz_target;

fn inventory() -> Vec<Device> {
    ["0", "1", "GPU-a", "7"]
        .iter()
        .enumerate()
        .map(|(index, id)| Device {
            id: DeviceId::new(id).expect("valid id"),
            index,
            name: format!("accel{index}"),
            nodes: vec![],
            numa_node: None,
            healthy: true,
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(request) = Request::parse(Some(value)) else {
        return;
    };
    if let Request::List(items) = &request {
        assert_eq!(
            Request::parse(Some(&items.join(","))).as_ref(),
            Ok(&request)
        );
    }
    let devices = inventory();
    let resolves = [Resolve::Ids, Resolve::Granted, Resolve::IdsOrPositions];
    for (replicas, resolve) in [1, 4].into_iter().flat_map(|r| resolves.map(|v| (r, v))) {
        if let Ok(sel) = request.select(&devices, replicas, resolve) {
            let mut seen = std::collections::BTreeSet::new();
            for i in sel.indices {
                assert!(i < devices.len());
                assert!(seen.insert(i), "device {i} selected twice");
            }
        }
    }
});
