use super::*;

use netlink_packet_route::link::LinkMessage;

fn link(index: u32, name: &str, mac: [u8; 6]) -> Link {
    let mut l = Link::from_message(LinkMessage::default());
    l.index = index;
    l.name = name.to_string();
    l.mac = mac.to_vec();
    l
}

/// A directory laid out as `/sys/class/net`, removed when dropped.
struct FakeSysfs(std::path::PathBuf);

impl FakeSysfs {
    fn new(tag: &str) -> FakeSysfs {
        let dir = std::env::temp_dir().join(format!("netkit-sysfs-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        FakeSysfs(dir)
    }

    fn device(&self, name: &str, ifindex: &str, address: &str, assign_type: &str) {
        let d = self.0.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join("ifindex"), format!("{ifindex}\n")).unwrap();
        std::fs::write(d.join("address"), format!("{address}\n")).unwrap();
        std::fs::write(d.join("addr_assign_type"), format!("{assign_type}\n")).unwrap();
    }

    fn root(&self) -> &str {
        self.0.to_str().unwrap()
    }
}

impl Drop for FakeSysfs {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

const MAC: [u8; 6] = [0x02, 0xfa, 0, 0, 0, 3];

#[test]
fn the_origin_is_read_when_the_directory_shows_this_very_link() {
    let sys = FakeSysfs::new("same");
    sys.device("br0", "7", "02:fa:00:00:00:03", "3");
    sys.device("br1", "8", "02:fa:00:00:00:04", "1");
    assert_eq!(
        mac_origin_under(sys.root(), &link(7, "br0", MAC)),
        Some(MacOrigin::Set)
    );
    let br1 = link(8, "br1", [0x02, 0xfa, 0, 0, 0, 4]);
    assert_eq!(mac_origin_under(sys.root(), &br1), Some(MacOrigin::Random));
}

#[test]
fn another_namespaces_device_of_that_name_gives_no_answer() {
    // sysfs mounted for another netns: a device of the same name, another index or MAC.
    let sys = FakeSysfs::new("other");
    sys.device("br0", "9", "02:fa:00:00:00:03", "3");
    sys.device("br1", "7", "02:fa:00:00:00:99", "3");
    assert_eq!(mac_origin_under(sys.root(), &link(7, "br0", MAC)), None);
    assert_eq!(mac_origin_under(sys.root(), &link(7, "br1", MAC)), None);
    // No such device there at all.
    assert_eq!(mac_origin_under(sys.root(), &link(7, "br2", MAC)), None);
}

#[test]
fn names_that_would_leave_the_directory_and_unknown_values_give_no_answer() {
    let sys = FakeSysfs::new("names");
    sys.device("br0", "7", "02:fa:00:00:00:03", "9");
    assert_eq!(mac_origin_under(sys.root(), &link(7, "br0", MAC)), None);
    for name in ["", ".", "..", "../br0", "a/b"] {
        assert_eq!(
            mac_origin_under(sys.root(), &link(7, name, MAC)),
            None,
            "{name:?}"
        );
    }
    assert_eq!(MacOrigin::from_sysfs("0\n"), Some(MacOrigin::Permanent));
    assert_eq!(MacOrigin::from_sysfs("2"), Some(MacOrigin::Stolen));
    assert_eq!(MacOrigin::from_sysfs(""), None);
}

mod kernel {
    use super::*;
    use crate::skip_unless_root;
    use crate::testutil::TestNetns;
    use crate::Socket;

    #[test]
    fn the_live_sysfs_answers_for_its_own_namespace_only() {
        skip_unless_root!();
        // Read only: the namespace this process's /sys was mounted for shows its own lo.
        let lo = Socket::new().unwrap().link_by_name("lo").unwrap();
        assert_eq!(mac_origin(&lo), Some(MacOrigin::Permanent));
        // A bridge of a netns entered without a sysfs mount of its own is not found there.
        let ns = TestNetns::new("nk-sys");
        let mut s = ns.socket().unwrap();
        let br = s
            .ensure_bridge("nksys0", &crate::BridgeOptions::default())
            .unwrap();
        assert_eq!(mac_origin(&br), None);
    }
}
