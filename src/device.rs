//! Block device selection: names, `/dev` paths and `major:minor` to the kernel `dev_t`
//! that block tracepoints record. Reads sysfs only.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum DeviceError {
    #[error("unknown block device `{given}`: no {sysfs}; list devices with `lsblk` and give a name (loop0), a path (/dev/loop0) or major:minor (7:0)")]
    Unknown { given: String, sysfs: PathBuf },
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} holds `{text}`, not major:minor")]
    BadDev { path: PathBuf, text: String },
    #[error("{path} holds `{text}`, not a number of sectors")]
    BadSectors { path: PathBuf, text: String },
}

/// A resolved whole-disk device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockDevice {
    pub name: String,
    pub major: u32,
    pub minor: u32,
    /// Set when the user named a partition: request events are reported against the
    /// whole disk, so the disk is traced and this says which partition was asked for.
    pub partition_of: Option<String>,
    /// The partition's sectors on the disk (512-byte units, as request events give a
    /// position): its requests are the disk's requests inside this span.
    pub span: Option<std::ops::Range<u64>>,
}

impl BlockDevice {
    pub fn kernel_dev(&self) -> u32 {
        kernel_dev(self.major, self.minor)
    }
}

/// Where block devices are described; a parameter so tests can use a fake tree.
#[derive(Debug, Clone)]
pub struct SysBlock {
    root: PathBuf,
}

impl Default for SysBlock {
    fn default() -> Self {
        SysBlock {
            root: PathBuf::from("/sys"),
        }
    }
}

impl SysBlock {
    /// No device of this host: for samples traced elsewhere (a capture from another
    /// host, a synthetic replay), whose device numbers name nothing here.
    pub fn none() -> SysBlock {
        SysBlock::at(Path::new("/nonexistent-sysfs"))
    }

    pub fn at(root: &Path) -> SysBlock {
        SysBlock {
            root: root.to_path_buf(),
        }
    }

    /// Resolve `loop0`, `/dev/loop0` or `7:0`.
    pub fn resolve(&self, given: &str) -> Result<BlockDevice, DeviceError> {
        let dir = if given.contains(':') && given.split(':').all(|p| p.parse::<u32>().is_ok()) {
            self.root.join("dev/block").join(given)
        } else {
            let name = given.strip_prefix("/dev/").unwrap_or(given);
            self.root.join("class/block").join(name)
        };
        let dir = fs::canonicalize(&dir).map_err(|_| DeviceError::Unknown {
            given: given.to_string(),
            sysfs: dir.clone(),
        })?;
        let is_partition = dir.join("partition").exists();
        let disk_dir = if is_partition {
            dir.parent().map(Path::to_path_buf).unwrap_or(dir.clone())
        } else {
            dir.clone()
        };
        let (major, minor) = read_dev(&disk_dir.join("dev"))?;
        let name_of = |d: &Path| {
            d.file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default()
        };
        let span = if is_partition {
            let start = read_sectors(&dir.join("start"))?;
            let size = read_sectors(&dir.join("size"))?;
            Some(start..start.saturating_add(size))
        } else {
            None
        };
        Ok(BlockDevice {
            name: name_of(&disk_dir),
            major,
            minor,
            partition_of: is_partition.then(|| name_of(&dir)),
            span,
        })
    }

    /// `queue/logical_block_size` of the named devices: the nvme profiles turn a
    /// command's block count into bytes with it. Unreadable entries are left out (the
    /// correlator then assumes 512 and its `lba_size` column says so).
    pub fn logical_block_sizes<'a>(
        &self,
        names: impl IntoIterator<Item = &'a String>,
    ) -> HashMap<String, u32> {
        names
            .into_iter()
            .filter_map(|n| {
                let path = self
                    .root
                    .join("class/block")
                    .join(n)
                    .join("queue/logical_block_size");
                let size = fs::read_to_string(path).ok()?.trim().parse().ok()?;
                Some((n.clone(), size))
            })
            .collect()
    }

    /// Every device under `name` in a stack (device-mapper, md: `slaves/`), at any depth,
    /// nearest first, each once.
    pub fn below(&self, name: &str) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut next = vec![name.to_string()];
        while let Some(n) = next.pop() {
            let Ok(rd) = fs::read_dir(self.root.join("class/block").join(&n).join("slaves")) else {
                continue;
            };
            let mut names: Vec<String> = rd
                .flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .collect();
            names.sort();
            for s in names {
                // A loop in sysfs would be a kernel bug; the check keeps it from hanging us.
                if s != name && !out.contains(&s) {
                    out.push(s.clone());
                    next.push(s);
                }
            }
        }
        out
    }

    /// The hidden path disks under `head` when it is an NVMe multipath namespace head
    /// (see [`multipath_head`]), sorted; empty for any other disk.
    pub fn multipath_paths(&self, head: &str) -> Vec<String> {
        self.paths_where(|h| h == head)
    }

    /// Every NVMe multipath path disk of this host, sorted.
    pub fn all_multipath_paths(&self) -> Vec<String> {
        self.paths_where(|_| true)
    }

    fn paths_where(&self, head: impl Fn(&str) -> bool) -> Vec<String> {
        let Ok(rd) = fs::read_dir(self.root.join("class/block")) else {
            return Vec::new();
        };
        let mut v: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| multipath_head(n).is_some_and(|h| head(&h)))
            .collect();
        v.sort();
        v
    }

    /// dev_t → name for every block device, for the `device` column.
    pub fn names(&self) -> HashMap<u32, String> {
        let mut m = HashMap::new();
        let Ok(rd) = fs::read_dir(self.root.join("class/block")) else {
            return m;
        };
        for e in rd.flatten() {
            if let Ok((maj, min)) = read_dev(&e.path().join("dev")) {
                m.insert(
                    kernel_dev(maj, min),
                    e.file_name().to_string_lossy().into_owned(),
                );
            }
        }
        m
    }
}

/// The namespace head above a native-multipath path disk: `nvme1c2n3` → `nvme1n3`.
/// With multipath (distribution kernels), a namespace of a multi-controller subsystem
/// (every Linux nvmet target's) is a bio-based head disk, `nvme<subsys>n<ns>`, whose
/// bios are queued there and made into requests on a hidden path disk of the
/// controller, `nvme<subsys>c<ctrl>n<ns>` (drivers/nvme/host/core.c, `nvme_alloc_ns`
/// in 6.1), which has no dev_t in sysfs. `None` for any other name.
pub fn multipath_head(name: &str) -> Option<String> {
    let (subsys, ns) = path_parts(name)?;
    Some(format!("nvme{subsys}n{ns}"))
}

/// Whether `name` is a multipath path disk's ([`multipath_head`]), without building
/// its head's name.
pub fn is_multipath_path(name: &str) -> bool {
    path_parts(name).is_some()
}

/// The subsystem and namespace numbers of a path disk's name `nvme<s>c<c>n<ns>`.
fn path_parts(name: &str) -> Option<(&str, &str)> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let rest = name.strip_prefix("nvme")?;
    let (subsys, rest) = rest.split_once('c')?;
    let (ctrl, ns) = rest.split_once('n')?;
    (digits(subsys) && digits(ctrl) && digits(ns)).then_some((subsys, ns))
}

/// `dev_t` as the kernel encodes it inside trace records (not the user-space encoding).
pub fn kernel_dev(major: u32, minor: u32) -> u32 {
    (major << 20) | (minor & 0xfffff)
}

/// A kernel `dev_t` as `major:minor`, the way `ls -l` and `/sys/block/*/dev` write it.
pub fn dev_text(dev: u32) -> String {
    format!("{}:{}", dev_major(dev), dev_minor(dev))
}

pub fn dev_major(dev: u32) -> u32 {
    dev >> 20
}

pub fn dev_minor(dev: u32) -> u32 {
    dev & 0xfffff
}

fn read_dev(path: &Path) -> Result<(u32, u32), DeviceError> {
    let text = fs::read_to_string(path).map_err(|source| DeviceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let t = text.trim();
    t.split_once(':')
        .and_then(|(a, b)| Some((a.parse().ok()?, b.parse().ok()?)))
        .ok_or_else(|| DeviceError::BadDev {
            path: path.to_path_buf(),
            text: t.to_string(),
        })
}

fn read_sectors(path: &Path) -> Result<u64, DeviceError> {
    let text = fs::read_to_string(path).map_err(|source| DeviceError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    text.trim().parse().map_err(|_| DeviceError::BadSectors {
        path: path.to_path_buf(),
        text: text.trim().to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_multipath_path_names_its_head() {
        assert_eq!(multipath_head("nvme1c2n3").as_deref(), Some("nvme1n3"));
        assert_eq!(multipath_head("nvme10c11n12").as_deref(), Some("nvme10n12"));
        assert!(is_multipath_path("nvme1c2n3") && !is_multipath_path("nvme1n3"));
        for other in [
            "nvme1n3",
            "nvme1n3p1",
            "nvmec1n1",
            "nvme1c1n",
            "nvme1c1n1p2",
            "sda",
            "",
        ] {
            assert_eq!(multipath_head(other), None, "{other}");
        }
    }

    #[test]
    fn dev_encoding() {
        let d = kernel_dev(7, 3);
        assert_eq!((dev_major(d), dev_minor(d)), (7, 3));
        assert_eq!(kernel_dev(259, 0), 259 << 20);
    }

    /// dm-2 over dm-1 over loop3 and loop4: everything below dm-2, nearest first.
    #[test]
    fn below_follows_the_stack_to_the_bottom() {
        let root = std::env::temp_dir().join(format!("ntprof-stack-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let slave = |upper: &str, lower: &str| {
            let d = root.join("class/block").join(upper).join("slaves");
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join(lower), "").unwrap();
        };
        slave("dm-2", "dm-1");
        slave("dm-1", "loop3");
        slave("dm-1", "loop4");
        let s = SysBlock::at(&root);
        assert_eq!(s.below("dm-2"), ["dm-1", "loop3", "loop4"]);
        assert_eq!(s.below("dm-1"), ["loop3", "loop4"]);
        assert!(s.below("loop3").is_empty());
        let _ = fs::remove_dir_all(root);
    }

    fn fake() -> (PathBuf, SysBlock) {
        let root = std::env::temp_dir().join(format!("ntprof-sys-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let devices = root.join("devices/virtual/block");
        fs::create_dir_all(devices.join("vdz/vdz1")).unwrap();
        fs::write(devices.join("vdz/dev"), "254:16\n").unwrap();
        fs::write(devices.join("vdz/vdz1/dev"), "254:17\n").unwrap();
        fs::write(devices.join("vdz/vdz1/partition"), "1\n").unwrap();
        fs::write(devices.join("vdz/vdz1/start"), "2048\n").unwrap();
        fs::write(devices.join("vdz/vdz1/size"), "4096\n").unwrap();
        fs::create_dir_all(root.join("class/block")).unwrap();
        fs::create_dir_all(root.join("dev/block")).unwrap();
        std::os::unix::fs::symlink(devices.join("vdz"), root.join("class/block/vdz")).unwrap();
        std::os::unix::fs::symlink(devices.join("vdz/vdz1"), root.join("class/block/vdz1"))
            .unwrap();
        std::os::unix::fs::symlink(devices.join("vdz"), root.join("dev/block/254:16")).unwrap();
        let s = SysBlock::at(&root);
        (root, s)
    }

    #[test]
    fn resolves_names_paths_numbers_and_partitions() {
        let (root, s) = fake();
        let d = s.resolve("vdz").unwrap();
        assert_eq!((d.name.as_str(), d.major, d.minor), ("vdz", 254, 16));
        assert_eq!(s.resolve("/dev/vdz").unwrap(), d);
        assert_eq!(s.resolve("254:16").unwrap(), d);
        let p = s.resolve("vdz1").unwrap();
        assert_eq!((p.name.as_str(), p.minor), ("vdz", 16));
        assert_eq!(p.partition_of.as_deref(), Some("vdz1"));
        assert_eq!((d.span, p.span), (None, Some(2048..6144)));
        // A hidden multipath path has no dev file; its head is found by name.
        fs::create_dir_all(root.join("class/block/nvme3c4n1")).unwrap();
        assert_eq!(s.multipath_paths("nvme3n1"), ["nvme3c4n1"]);
        assert!(s.multipath_paths("vdz").is_empty());
        assert_eq!(s.all_multipath_paths(), ["nvme3c4n1"]);
        let e = s.resolve("nosuch").unwrap_err().to_string();
        assert!(e.contains("nosuch") && e.contains("lsblk"), "{e}");
        assert_eq!(
            s.names().get(&kernel_dev(254, 16)).map(String::as_str),
            Some("vdz")
        );
        let _ = fs::remove_dir_all(root);
    }
}
