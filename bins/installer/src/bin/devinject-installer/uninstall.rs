//! `devinject-installer --uninstall`: options.

use devinject_installer::UninstallOptions;

use crate::HostArgs;

/// The library's options for an uninstall.
pub fn options(host: &HostArgs) -> anyhow::Result<UninstallOptions> {
    let mut o = UninstallOptions::new(host.host_root.clone());
    o.layout = host.layout()?;
    o.engines = host.engines()?;
    o.runtime_name = host.runtime_name.clone();
    o.restart = host.restart_mode();
    o.dry_run = host.dry_run;
    o.fault = host.fault()?;
    Ok(o)
}
