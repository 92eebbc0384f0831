//! host-local IPAM plugin binary: the library's verbs on the CNI skeleton, and the build stamp
//! that lets a plugin linking the same build answer for this binary in-process.

use host_local::plugin::{HostLocal, ABOUT, STAMP};
use libcni::linked::StampNote;
use libcni::skel;

#[used]
#[link_section = ".note.ferrocni"]
static STAMP_NOTE: StampNote = StampNote::new(STAMP);

fn main() {
    skel::run(&HostLocal, ABOUT);
}
