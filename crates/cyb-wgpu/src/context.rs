//! Choosing an adapter and opening a device on it.
//!
//! Any native adapter works (Vulkan, Metal, DX12, GL); `CYB_WGPU_ADAPTER` picks the first whose
//! name, driver or backend contains the given text (case-insensitive). Hardware GPUs are
//! preferred over software rasterizers, which are still accepted (CI runs on lavapipe).

use cyb_tensor::{Error, Result};
use std::sync::{Arc, Mutex, PoisonError};

/// One adapter as `cyb-llm backends` lists it.
#[derive(Clone, Debug)]
pub struct AdapterReport {
    pub name: String,
    pub backend: String,
    pub device_type: String,
    pub driver: String,
    /// Largest single storage buffer binding, bytes.
    pub max_storage_binding: u64,
    pub max_buffer_size: u64,
    pub max_workgroup_invocations: u32,
    pub max_workgroup_storage: u32,
    /// The subgroup size the kernels would use on it (0: none; `subgroup_size`).
    pub subgroup: u32,
    /// Whether prefill matmuls would run on its cooperative matrices (`coop_matrices`).
    pub coop: bool,
}

impl AdapterReport {
    fn of(adapter: &wgpu::Adapter) -> AdapterReport {
        let info = adapter.get_info();
        let limits = adapter.limits();
        AdapterReport {
            name: info.name,
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info)
                .trim()
                .to_string(),
            max_storage_binding: limits.max_storage_buffer_binding_size,
            max_buffer_size: limits.max_buffer_size,
            max_workgroup_invocations: limits.max_compute_invocations_per_workgroup,
            max_workgroup_storage: limits.max_compute_workgroup_storage_size,
            subgroup: subgroup_size(adapter),
            coop: coop_matrices(adapter),
        }
    }

    /// One line: name, API, kind and the limits that bound model size.
    pub fn summary(&self) -> String {
        format!(
            "{} ({}, {}, driver {}): max storage binding {} MiB, max buffer {} MiB, \
             {} invocations/workgroup, {} KiB workgroup memory, {}{}",
            self.name,
            self.backend,
            self.device_type,
            if self.driver.is_empty() {
                "?"
            } else {
                &self.driver
            },
            self.max_storage_binding >> 20,
            self.max_buffer_size >> 20,
            self.max_workgroup_invocations,
            self.max_workgroup_storage >> 10,
            match self.subgroup {
                0 => "no subgroup reductions".to_string(),
                n => format!("subgroups of {n}"),
            },
            if self.coop {
                ", prefill on 16×16×16 f16 cooperative matrices"
            } else {
                ""
            }
        )
    }

    fn matches(&self, needle: &str) -> bool {
        let n = needle.to_lowercase();
        [&self.name, &self.backend, &self.driver, &self.device_type]
            .iter()
            .any(|s| s.to_lowercase().contains(&n))
    }
}

fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    desc.backends =
        wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12 | wgpu::Backends::GL;
    wgpu::Instance::new(desc)
}

/// Every adapter wgpu finds on this machine.
pub fn adapters() -> Vec<AdapterReport> {
    let inst = instance();
    pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()))
        .iter()
        .map(AdapterReport::of)
        .collect()
}

/// The adapter `--backend auto` would run on: the first discrete GPU, else the first
/// integrated one, among the native APIs (Vulkan, Metal, DX12; GL and software rasterizers such
/// as lavapipe are never chosen); `None` when there is no such adapter.
pub fn auto_adapter() -> Option<AdapterReport> {
    if !gpu_device_nodes() {
        return None;
    }
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle();
    let native = wgpu::Backends::VULKAN | wgpu::Backends::METAL | wgpu::Backends::DX12;
    desc.backends = native;
    let inst = wgpu::Instance::new(desc);
    let found = pollster::block_on(inst.enumerate_adapters(native));
    let rank = |t: wgpu::DeviceType| match t {
        wgpu::DeviceType::DiscreteGpu => Some(0),
        wgpu::DeviceType::IntegratedGpu => Some(1),
        _ => None,
    };
    found
        .iter()
        .filter_map(|a| Some((rank(a.get_info().device_type)?, a)))
        .min_by_key(|(r, _)| *r)
        .map(|(_, a)| AdapterReport::of(a))
}

/// Whether this machine may have a hardware GPU: on Linux, a DRM render node, an NVIDIA device
/// or WSL's GPU device; elsewhere always. Without one, `auto` does not start a graphics API
/// at all (no start-up cost, no driver messages on machines with only a software rasterizer).
fn gpu_device_nodes() -> bool {
    if !cfg!(target_os = "linux") {
        return true;
    }
    let render_node = std::fs::read_dir("/dev/dri").is_ok_and(|dir| {
        dir.flatten()
            .any(|e| e.file_name().to_string_lossy().starts_with("renderD"))
    });
    render_node
        || std::path::Path::new("/dev/nvidiactl").exists()
        || std::path::Path::new("/dev/nvidia0").exists()
        || std::path::Path::new("/dev/dxg").exists()
}

/// An open device, its queue, and the first validation error the device reported, if any.
pub struct GpuContext {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub adapter: AdapterReport,
    pub limits: wgpu::Limits,
    /// The adapter's subgroup size where the device has subgroup operations and one fixed
    /// size of 4 to 32 lanes (the kernels' reductions then use them); else 0.
    pub subgroup: u32,
    errors: Arc<Mutex<Option<String>>>,
}

impl GpuContext {
    /// Opens the adapter `options.adapter` names, else the best one found.
    pub fn open(options: &crate::WgpuOptions) -> Result<GpuContext> {
        let wanted = options.adapter.clone();
        let inst = instance();
        let mut found = pollster::block_on(inst.enumerate_adapters(wgpu::Backends::all()));
        let reports = found_reports(&found);
        let found_list = || -> String {
            let names: Vec<String> = reports.iter().map(|r| r.summary()).collect();
            if names.is_empty() {
                "no adapter found (install a Vulkan driver, e.g. Debian's mesa-vulkan-drivers)"
                    .to_string()
            } else {
                format!("found: {}", names.join("; "))
            }
        };
        // Hardware first, then the rest (software and GL last).
        found.sort_by_key(|a| {
            let info = a.get_info();
            let kind = match info.device_type {
                wgpu::DeviceType::DiscreteGpu => 0,
                wgpu::DeviceType::IntegratedGpu => 1,
                wgpu::DeviceType::VirtualGpu => 2,
                wgpu::DeviceType::Other => 3,
                wgpu::DeviceType::Cpu => 4,
            };
            let api = if info.backend == wgpu::Backend::Gl {
                1
            } else {
                0
            };
            (api, kind)
        });
        let candidates: Vec<&wgpu::Adapter> = match &wanted {
            Some(w) => found
                .iter()
                .filter(|a| AdapterReport::of(a).matches(w))
                .collect(),
            None => found.iter().collect(),
        };
        if candidates.is_empty() {
            let reason = match &wanted {
                Some(w) => format!(
                    "no adapter matches {w:?} (CYB_WGPU_ADAPTER); {}",
                    found_list()
                ),
                None => found_list(),
            };
            return Err(Error::BackendInit {
                backend: "wgpu".into(),
                reason,
            });
        }
        let mut failures = Vec::new();
        for adapter in candidates {
            match open_device(adapter, options) {
                Ok(ctx) => return Ok(ctx),
                Err(e) => failures.push(format!("{}: {e}", adapter.get_info().name)),
            }
        }
        Err(Error::BackendInit {
            backend: "wgpu".into(),
            reason: format!(
                "no adapter could open a device ({}); {}",
                failures.join("; "),
                found_list()
            ),
        })
    }

    /// Keeps `msg` as if the device had reported it (for work recorded where no error can be
    /// returned), unless an earlier one is kept.
    pub fn keep_error(&self, msg: String) {
        let mut e = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        e.get_or_insert(msg);
    }

    /// The first error the device reported since the last call, as an `Error` naming `op`.
    pub fn take_error(&self, op: &str) -> Result<()> {
        let mut e = self.errors.lock().unwrap_or_else(PoisonError::into_inner);
        match e.take() {
            Some(msg) => Err(Error::invalid(op, format!("wgpu: {msg}"))),
            None => Ok(()),
        }
    }
}

fn found_reports(found: &[wgpu::Adapter]) -> Vec<AdapterReport> {
    found.iter().map(AdapterReport::of).collect()
}

fn open_device(
    adapter: &wgpu::Adapter,
    options: &crate::WgpuOptions,
) -> std::result::Result<GpuContext, String> {
    // Ask for everything the adapter offers: model weights need its largest buffers.
    let limits = adapter.limits();
    // Timestamps only for `WgpuOptions::gpu_time` (gpu_time.rs).
    let timing = options.gpu_time.is_some();
    let mut features = if timing {
        adapter.features() & wgpu::Features::TIMESTAMP_QUERY
    } else {
        wgpu::Features::empty()
    };
    let subgroup = if options.subgroups {
        subgroup_size(adapter)
    } else {
        0
    };
    if subgroup != 0 {
        features |= wgpu::Features::SUBGROUP;
    }
    let mut report = AdapterReport::of(adapter);
    // The device gets f16 and cooperative matrices for the prefill matmuls where the report
    // says they would run (`coop_matrices`) and the options allow them.
    report.coop &= options.cooperative_matrices && subgroup == 32;
    let coop = report.coop;
    if coop {
        features |= wgpu::Features::SHADER_F16 | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX;
    }
    let desc = wgpu::DeviceDescriptor {
        label: Some("cyb-wgpu"),
        required_features: features,
        required_limits: limits.clone(),
        experimental_features: if coop {
            // SAFETY: of the experimental features only cooperative matrices are requested,
            // and only matmul_coop.wgsl uses them, as their specification allows: 16 × 16 × 16
            // f16 products with f32 sums (a configuration the adapter lists), operands in
            // workgroup memory at 16-byte aligned rows, every operation in uniform control
            // flow of subgroups of 32 (the size the kernel assumes, checked here).
            unsafe { wgpu::ExperimentalFeatures::enabled() }
        } else {
            wgpu::ExperimentalFeatures::disabled()
        },
        ..Default::default()
    };
    let (device, queue) =
        pollster::block_on(adapter.request_device(&desc)).map_err(|e| e.to_string())?;
    let errors: Arc<Mutex<Option<String>>> = Arc::new(Mutex::new(None));
    let sink = errors.clone();
    // wgpu panics on uncaptured errors by default; keep the first one and report it instead.
    device.on_uncaptured_error(Arc::new(move |e: wgpu::Error| {
        tracing::error!("wgpu device error: {e}");
        let mut slot = sink.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert_with(|| e.to_string());
    }));
    Ok(GpuContext {
        device,
        queue,
        adapter: report,
        limits,
        subgroup,
        errors,
    })
}

/// Whether prefill matmuls may run on cooperative matrices (tensor cores): the adapter offers
/// f16 shaders and a 16 × 16 × 16 product of f16 operands with f32 sums, its subgroups are 32
/// lanes (matmul_coop.wgsl gives each 32 threads one product).
fn coop_matrices(adapter: &wgpu::Adapter) -> bool {
    let need = wgpu::Features::SHADER_F16
        | wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX
        | wgpu::Features::SUBGROUP;
    if !adapter.features().contains(need) || subgroup_size(adapter) != 32 {
        return false;
    }
    adapter.cooperative_matrix_properties().iter().any(|p| {
        p.m_size == 16
            && p.n_size == 16
            && p.k_size == 16
            && p.ab_type == wgpu::CooperativeScalarType::F16
            && p.cr_type == wgpu::CooperativeScalarType::F32
    })
}

/// The subgroup size the kernels may rely on: the adapter has subgroup operations, one size
/// (min == max, so a launch cannot get another), a power of two from 4 to 32 (the decode
/// matvecs give every row at least 32 lanes).
fn subgroup_size(adapter: &wgpu::Adapter) -> u32 {
    if !adapter.features().contains(wgpu::Features::SUBGROUP) {
        return 0;
    }
    let info = adapter.get_info();
    let size = info.subgroup_min_size;
    if size != info.subgroup_max_size || !size.is_power_of_two() || !(4..=32).contains(&size) {
        return 0;
    }
    size
}
