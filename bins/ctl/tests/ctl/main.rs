//! devinject-ctl's integration tests, one binary: each file a module (the command line, engine
//! configuration behaviour and golden files, detection, the host writer and host directories, CDI
//! generation, its schema and watch, devices list, doctor), sharing `support`.

mod behaviour;
mod cdi;
mod cdi_schema;
mod cdi_watch;
mod cli;
mod detection;
mod devices_list;
mod doctor;
mod doctor_cdi;
mod golden;
mod host_dirs;
mod host_writer;
mod support;
