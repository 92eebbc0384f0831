//! The uplink: the interface of the first default route (what macvlan and ipvlan use as
//! their parent when none is configured).

use crate::addr::Family;
use crate::error::Result;
use crate::link::Link;
use crate::netlink::Socket;
use crate::route::TABLE_MAIN;

impl Socket {
    /// The link of the first main-table default route, IPv4 routes before IPv6 ones (the
    /// kernel's dump order, which the Go plugins also follow). `None` without a default route;
    /// multipath defaults, which name no single device, are skipped.
    pub fn default_route_link(&mut self) -> Result<Option<Link>> {
        let routes = self.routes(Family::Any, Some(TABLE_MAIN))?;
        for route in routes.iter().filter(|r| r.dst.prefix() == 0) {
            if let Some(oif) = route.oif {
                return self.link_by_index(oif).map(Some);
            }
        }
        Ok(None)
    }
}
