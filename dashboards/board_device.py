"""Device view: one host's accelerators from the hardware collectors, and the jobs on them."""

from __future__ import annotations

from dashboards.grafana import Board, Panel, Row, Variable, q

H = 'instance=~"$instance"'
D = H + ', device=~"$device"'
DEV = "{{instance}} dev {{device}}"
RATE = "[$__rate_interval]"


def _memory() -> Row:
    return Row("Memory", (
        Panel("Memory used and total", "Device memory in use by all processes, and capacity.",
              (q(f"xmon_device_memory_used_bytes{{{D}}}", "used " + DEV),
               q(f"xmon_device_memory_total_bytes{{{D}}}", "total " + DEV)), unit="bytes"),
        Panel("Memory used over total", "Fraction of device memory in use.",
              (q(f"xmon_device_memory_used_bytes{{{D}}} / xmon_device_memory_total_bytes{{{D}}}",
                 DEV),), unit="percentunit", max=1),
        Panel("PJRT memory by job", "Live bytes each attached job holds on the device "
              "(matched by the job's local_hardware_id).",
              (q(f"sum by (instance, job_name, pid, local_hardware_id) "
                 f"(xmon_job_device_memory_in_use_bytes{{{H}}} * on(instance, job_name, pid, "
                 f"device) group_left(local_hardware_id) "
                 f'xmon_job_device_info{{{H}, local_hardware_id=~"$device"}})',
                 "{{job_name}} ({{pid}}) dev {{local_hardware_id}}"),), unit="bytes"),
        Panel("Memory by process", "Device memory each process holds as the driver sees it "
              "(NVML; with JAX's preallocation the reserved pool).",
              (q(f"xmon_device_process_memory_used_bytes{{{D}}}",
                 "{{job_name}} pid {{pid}} dev {{device}}"),), unit="bytes"),
    ))  # fmt: skip


def _busy() -> Row:
    return Row("Utilisation", (
        Panel("Busy", "TensorCore duty cycle (TPU) and kernel utilisation (GPU).",
              (q(f"xmon_device_duty_cycle_ratio{{{D}}}", "duty cycle " + DEV),
               q(f"xmon_device_utilization_ratio{{{D}}}", "utilisation " + DEV)),
              unit="percentunit", max=1),
        Panel("SM and tensor activity", "NVML GPM (Hopper and later): SMs busy, tensor "
              "cores busy, DRAM bandwidth, occupancy.",
              (q(f"xmon_device_sm_active_ratio{{{D}}}", "SM active " + DEV),
               q(f"xmon_device_tensor_active_ratio{{{D}}}", "tensor active " + DEV),
               q(f"xmon_device_dram_active_ratio{{{D}}}", "DRAM active " + DEV),
               q(f"xmon_device_sm_occupancy_ratio{{{D}}}", "occupancy " + DEV)),
              unit="percentunit", max=1),
        Panel("Memory busy", "Fraction of time device memory was read or written.",
              (q(f"xmon_device_memory_busy_ratio{{{D}}}", DEV),), unit="percentunit", max=1),
        Panel("Jobs on the device", "Attached jobs' view of the selected devices.",
              (q(f'xmon_job_device_info{{{H}, local_hardware_id=~"$device"}}'),), "table"),
    ))  # fmt: skip


def _power() -> Row:
    return Row("Power, temperature and clocks", (
        Panel("Power", "Power draw, energy counter rate and enforced limit.",
              (q(f"xmon_device_power_watts{{{D}}}", "draw " + DEV),
               q(f"rate(xmon_device_energy_joules_total{{{D}}}{RATE})", "energy rate " + DEV),
               q(f"xmon_device_power_limit_watts{{{D}}}", "limit " + DEV)), unit="watt",
              width=8),
        Panel("Temperature", "Device temperature.",
              (q(f"xmon_device_temperature_celsius{{{D}}}", DEV),), unit="celsius", width=8),
        Panel("Clocks", "SM and memory clocks.",
              (q(f"xmon_device_sm_clock_hertz{{{D}}}", "SM " + DEV),
               q(f"xmon_device_memory_clock_hertz{{{D}}}", "memory " + DEV)), unit="hertz",
              width=8),
    ))  # fmt: skip


def _links() -> Row:
    return Row("Interconnect and errors", (
        Panel("PCIe", "PCIe bytes per second sent and received by the device.",
              (q(f"xmon_device_pcie_tx_bytes_per_second{{{D}}}", "tx " + DEV),
               q(f"xmon_device_pcie_rx_bytes_per_second{{{D}}}", "rx " + DEV)), unit="Bps",
              width=8),
        Panel("NVLink", "NVLink bytes per second, all links together.",
              (q(f"xmon_device_nvlink_tx_bytes_per_second{{{D}}}", "tx " + DEV),
               q(f"xmon_device_nvlink_rx_bytes_per_second{{{D}}}", "rx " + DEV)), unit="Bps",
              width=8),
        Panel("ECC and XID errors", "ECC errors since the driver loaded, XID errors since the "
              "daemon started, and the last XID code.",
              (q(f"xmon_device_ecc_errors_total{{{D}}}"),
               q(f"xmon_device_xid_errors_total{{{D}}}"),
               q(f"xmon_device_last_xid{{{D}}}")), "table", width=8),
        Panel("Devices", "Each accelerator: kind, platform, uuid, PCI bus id and the "
              "collector that found it.", (q(f"xmon_device_info{{{D}}}"),), "table", width=24,
              height=6),
    ))  # fmt: skip


BOARD = Board(
    uid="xmon-device",
    title="xmon / Device",
    description="The accelerators of one host as the TPU and GPU hardware collectors see "
    "them (memory, utilisation, power, clocks, links, errors) and the jobs on them.",
    variables=(
        Variable("instance", "Host", "label_values(xmon_up, instance)", multi=False),
        Variable(
            "device", "Device", 'label_values(xmon_device_info{instance=~"$instance"}, device)'
        ),
    ),  # fmt: skip
    rows=(_memory(), _busy(), _power(), _links()),
)
