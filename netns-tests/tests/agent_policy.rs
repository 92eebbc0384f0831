//! NetworkPolicy enforcement end to end (`--network-policy`), on the real Kubernetes 1.20
//! control plane and a vxlan cluster of three nodes whose pods are API objects (the harness
//! plays the kubelets: src/policy.rs). Namespace `prod` (team=a) has `db` on node 1 (named
//! ports `pg` 5432/TCP and `dns` 5353/UDP), `web` on node 2 and `web2` on node 1 (db's bridge:
//! the bridged path); namespace `dev` (team=b) has `tool` and `tool2` on node 3. Each step
//! changes policies or labels and probes TCP and UDP both ways until the data path shows the
//! change (its latency is printed at the end): no policy; default-deny ingress (egress,
//! replies and the node's own probes still pass; a pod started later is isolated, until it has
//! succeeded); a named port; a namespace AND pod selector, then label changes; an ipBlock with
//! an exception; a port range (`endPort`, which a 1.20 apiserver drops: then port 5000 alone);
//! egress; every policy deleted; an agent restart under a default-deny that lets no denied
//! probe through; and a new pod covered by the CNI chain's `ferrocni-policy` step the moment
//! its ADD returns, before the kubelet reports its address.
//! While the agent lacks `--network-policy`, only the first step runs.

use std::time::{Duration, Instant};

use netns_tests::agent_cluster::require_tools;
use netns_tests::policy::{both_ways, ContainerPort, Endpoint, Flow, PolicyCluster, Proto};
use netns_tests::{kernel_has, our_binary, require_driver, require_root};
use serde_json::{json, Value};

/// How long the prober keeps probing after the restarted agent started (its first sync).
const AFTER_RESTART: Duration = Duration::from_secs(3);

struct Pods {
    db: Endpoint,
    web: Endpoint,
    web2: Endpoint,
    tool: Endpoint,
    tool2: Endpoint,
}

impl Pods {
    fn all(&self) -> [&Endpoint; 5] {
        [&self.db, &self.web, &self.web2, &self.tool, &self.tool2]
    }
}

fn policy(name: &str, spec: Value) -> Value {
    json!({
        "apiVersion": "networking.k8s.io/v1", "kind": "NetworkPolicy",
        "metadata": {"name": name, "namespace": "prod"},
        "spec": spec,
    })
}

fn default_deny_ingress() -> Value {
    policy(
        "default-deny-ingress",
        json!({"podSelector": {}, "policyTypes": ["Ingress"]}),
    )
}

/// web may reach db on db's named port `pg` (TCP 5432) only.
fn web_to_db_pg() -> Value {
    policy(
        "web-to-db-pg",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                "ports": [{"port": "pg"}]}]}),
    )
}

/// Every flow between every two pods, both ways, TCP and UDP, allowed; the node's own probe
/// too, and SCTP between web and db.
fn everything_allowed(p: &Pods, node1: &Endpoint) -> Vec<Flow> {
    let all = p.all();
    let mut flows = Vec::new();
    for (i, a) in all.iter().enumerate() {
        for b in &all[i + 1..] {
            flows.extend(both_ways(a, b, true, true));
        }
    }
    flows.push(Flow::tcp(node1, &p.db, 5432, true));
    flows.push(Flow::new(&p.web, &p.db, Proto::Sctp, 5432, true));
    flows.push(Flow::new(&p.db, &p.web, Proto::Sctp, 5432, true));
    flows
}

#[test]
fn network_policies_on_a_vxlan_cluster() {
    require_root!();
    let probe = std::path::Path::new(env!("CARGO_BIN_EXE_probe"));
    let Some(mut c) = PolicyCluster::start("kpol", probe) else {
        return;
    };
    let started = Instant::now();
    c.namespace("prod", &[("team", "a")]);
    c.namespace("dev", &[("team", "b")]);
    let db_ports = [
        ContainerPort {
            name: "pg",
            port: 5432,
            proto: Proto::Tcp,
        },
        ContainerPort {
            name: "dns",
            port: 5353,
            proto: Proto::Udp,
        },
    ];
    let p = Pods {
        db: c.add_pod("prod", "db", 0, &[("app", "db")], &db_ports),
        web: c.add_pod("prod", "web", 1, &[("app", "web")], &[]),
        web2: c.add_pod("prod", "web2", 0, &[("app", "web2")], &[]),
        tool: c.add_pod("dev", "tool", 2, &[("app", "tool")], &[]),
        tool2: c.add_pod("dev", "tool2", 2, &[("app", "tool2")], &[]),
    };
    let (node1, node2) = (c.node_endpoint(0), c.node_endpoint(1));

    eprintln!("a. no policy: every flow is allowed");
    c.check("a. no policy", &everything_allowed(&p, &node1));
    if !c.enforcing {
        eprintln!(
            "skipping steps b to i: this ferrocni-agent has no --network-policy (its --help \
             does not list it)"
        );
        return;
    }

    eprintln!("b. default-deny ingress in prod");
    c.apply(&default_deny_ingress());
    let mut flows = Vec::new();
    for (a, b) in [(&p.db, &p.web), (&p.db, &p.web2), (&p.web, &p.web2)] {
        flows.extend(both_ways(a, b, false, false));
    }
    // Egress from prod to dev is not selected: allowed, and its replies come back in.
    for (a, b) in [(&p.db, &p.tool), (&p.web, &p.tool), (&p.web2, &p.tool2)] {
        flows.extend(both_ways(a, b, true, false));
    }
    flows.extend(both_ways(&p.tool, &p.tool2, true, true));
    // A node reaches its own pods (the kubelet's probes), bridged or not.
    flows.push(Flow::tcp(&node1, &p.db, 5432, true));
    flows.push(Flow::udp(&node1, &p.db, 5353, true));
    flows.push(Flow::tcp(&node1, &p.web2, 5432, true));
    flows.push(Flow::tcp(&node2, &p.web, 5432, true));
    c.check("b. default-deny ingress", &flows);
    // A pod that starts under the policy is isolated as soon as it runs.
    let late = c.add_pod("prod", "late", 1, &[("app", "late")], &[]);
    let mut flows = both_ways(&late, &p.tool, true, false);
    flows.extend(both_ways(&late, &p.web, false, false));
    c.check("b. a pod started under default-deny", &flows);
    // Once it has succeeded it is no pod of prod any more: nothing isolates its address.
    c.pod_succeeded("prod", "late");
    c.check(
        "b. a succeeded pod is no longer selected",
        &[
            Flow::tcp(&p.tool, &late, 5432, true),
            Flow::udp(&p.tool, &late, 5353, true),
            Flow::tcp(&p.tool, &p.web, 5432, false),
        ],
    );

    eprintln!("c. web may reach db on the named port pg");
    c.apply(&web_to_db_pg());
    c.check(
        "c. named port pg",
        &[
            Flow::tcp(&p.web, &p.db, 5432, true),
            Flow::udp(&p.web, &p.db, 5353, false),
            Flow::udp(&p.web, &p.db, 5432, false),
            Flow::tcp(&p.web, &p.db, 5001, false),
            Flow::new(&p.web, &p.db, Proto::Sctp, 5432, false),
            Flow::tcp(&p.web2, &p.db, 5432, false),
            Flow::tcp(&p.tool, &p.db, 5432, false),
            Flow::tcp(&p.tool2, &p.db, 5432, false),
            Flow::tcp(&p.db, &p.web, 5432, false),
            Flow::tcp(&p.web, &p.web2, 5432, false),
            Flow::tcp(&p.web, &p.tool, 5432, true),
        ],
    );

    eprintln!("d. namespace team=b AND pod app=tool may reach db:5432");
    c.apply(&policy(
        "tool-to-db",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{
                "namespaceSelector": {"matchLabels": {"team": "b"}},
                "podSelector": {"matchLabels": {"app": "tool"}}}],
                "ports": [{"protocol": "TCP", "port": 5432}]}]}),
    ));
    c.check(
        "d. namespace AND pod selector",
        &[
            Flow::tcp(&p.tool, &p.db, 5432, true),
            // The same namespace is not enough (AND, not OR).
            Flow::tcp(&p.tool2, &p.db, 5432, false),
            Flow::udp(&p.tool, &p.db, 5353, false),
            Flow::tcp(&p.web, &p.db, 5432, true),
            Flow::tcp(&p.web2, &p.db, 5432, false),
        ],
    );
    c.relabel(Some("dev"), "pod", "tool2", &["app=tool"]);
    c.check(
        "d. pod tool2 relabelled app=tool",
        &[
            Flow::tcp(&p.tool2, &p.db, 5432, true),
            Flow::tcp(&p.tool, &p.db, 5432, true),
        ],
    );
    c.relabel(Some("dev"), "pod", "tool2", &["app=tool2"]);
    c.check(
        "d. pod tool2 relabelled back",
        &[
            Flow::tcp(&p.tool2, &p.db, 5432, false),
            Flow::tcp(&p.tool, &p.db, 5432, true),
        ],
    );
    c.relabel(None, "namespace", "dev", &["team=c"]);
    c.check(
        "d. namespace dev relabelled team=c",
        &[
            Flow::tcp(&p.tool, &p.db, 5432, false),
            Flow::tcp(&p.web, &p.db, 5432, true),
        ],
    );

    eprintln!("e. ipBlock: node 3's pod subnet except tool");
    let node3_subnet = c.kube.subnets[2].clone();
    c.apply(&policy(
        "node3-but-tool",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"ipBlock": {"cidr": node3_subnet,
                "except": [format!("{}/32", p.tool.ip)]}}]}]}),
    ));
    c.check(
        "e. ipBlock with except",
        &[
            Flow::tcp(&p.tool2, &p.db, 5432, true),
            Flow::udp(&p.tool2, &p.db, 5353, true),
            Flow::tcp(&p.tool, &p.db, 5432, false),
            Flow::udp(&p.tool, &p.db, 5353, false),
            Flow::tcp(&p.web2, &p.db, 5432, false),
            Flow::tcp(&p.web, &p.db, 5432, true),
        ],
    );

    eprintln!("f. a port range: web2 may reach db on TCP 5000-5005");
    c.apply(&policy(
        "web2-to-db-range",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web2"}}}],
                "ports": [{"protocol": "TCP", "port": 5000, "endPort": 5005}]}]}),
    ));
    let stored = c.stored_policy("prod", "web2-to-db-range");
    if stored["spec"]["ingress"][0]["ports"][0]["endPort"].is_null() {
        // Kubernetes 1.20 predates endPort: the apiserver drops it, leaving port 5000 alone.
        eprintln!("f. this apiserver dropped endPort (before 1.21): checking port 5000 alone");
        c.check(
            "f. port 5000 (endPort dropped)",
            &[
                Flow::tcp(&p.web2, &p.db, 5000, true),
                Flow::tcp(&p.web2, &p.db, 5003, false),
                Flow::tcp(&p.web2, &p.db, 5432, false),
            ],
        );
    } else {
        c.check(
            "f. endPort",
            &[
                Flow::tcp(&p.web2, &p.db, 5000, true),
                Flow::tcp(&p.web2, &p.db, 5003, true),
                Flow::tcp(&p.web2, &p.db, 5005, true),
                Flow::tcp(&p.web2, &p.db, 5006, false),
                Flow::tcp(&p.web2, &p.db, 5007, false),
                Flow::tcp(&p.web2, &p.db, 5432, false),
            ],
        );
    }

    eprintln!("g. egress: web may send only UDP 5353 to db");
    c.apply(&policy(
        "web-to-db-dns",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                "ports": [{"protocol": "UDP", "port": "dns"}]}]}),
    ));
    c.check(
        "g. named UDP port dns",
        &[
            Flow::udp(&p.web, &p.db, 5353, true),
            Flow::udp(&p.web, &p.db, 5432, false),
        ],
    );
    c.apply(&policy(
        "web-egress-dns-only",
        json!({"podSelector": {"matchLabels": {"app": "web"}},
            "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}],
                "ports": [{"protocol": "UDP", "port": 5353}]}]}),
    ));
    c.check(
        "g. egress",
        &[
            Flow::udp(&p.web, &p.db, 5353, true),
            // db's ingress allows it; web's egress does not.
            Flow::tcp(&p.web, &p.db, 5432, false),
            Flow::tcp(&p.web, &p.tool, 5432, false),
            Flow::udp(&p.web, &p.tool, 5353, false),
            // Other pods are unaffected.
            Flow::tcp(&p.db, &p.tool, 5432, true),
            Flow::tcp(&p.web2, &p.tool, 5432, true),
            Flow::udp(&p.web2, &p.tool2, 5353, true),
            Flow::tcp(&p.tool, &p.tool2, 5432, true),
            Flow::tcp(&p.tool, &p.web, 5432, false),
            Flow::tcp(&node2, &p.web, 5432, true),
        ],
    );

    eprintln!("h. every policy deleted: every flow is back");
    c.delete_all_policies();
    c.check("h. no policy again", &everything_allowed(&p, &node1));

    eprintln!("i. node 1's agent restarts under a default-deny");
    c.apply(&default_deny_ingress());
    c.apply(&web_to_db_pg());
    let denied = [
        Flow::tcp(&p.tool, &p.db, 5432, false),
        Flow::udp(&p.tool, &p.db, 5353, false),
    ];
    let mut flows = denied.to_vec();
    flows.push(Flow::tcp(&p.web, &p.db, 5432, true));
    c.check("i. default-deny and pg before the restart", &flows);
    let probers: Vec<_> = denied.iter().map(|f| c.prober(f)).collect();
    c.kube.agents[0].stop();
    c.kube.agents[0].start();
    std::thread::sleep(AFTER_RESTART);
    for (flow, prober) in denied.iter().zip(probers) {
        let (attempts, answered) = prober.finish();
        eprintln!(
            "i. {} -> {} {}/{}: {answered} of {attempts} probes answered across the restart",
            flow.from.name,
            flow.to.name,
            flow.port,
            flow.proto.name()
        );
        assert!(attempts >= 20, "the prober hardly ran: {attempts} attempts");
        assert_eq!(
            answered, 0,
            "a denied flow passed during the agent's restart"
        );
    }
    c.check("i. after the restart", &flows);

    eprintln!("i. policy explain, with the agent's own service account");
    let explain = |from: &str, to: &str, port: &str| {
        // From node 1, where the apiserver is reachable.
        let out = std::process::Command::new("ip")
            .args(["netns", "exec", c.kube.nodes[0].ns.name()])
            .arg(our_binary("ferrocni-agent"))
            .args(["policy", "explain"])
            .arg(format!("--kubeconfig-file={}", c.kube.kubeconfig.display()))
            .args([from, to, port])
            .output()
            .expect("ferrocni-agent policy explain");
        assert!(
            out.status.success(),
            "policy explain {from} {to} {port}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let denied = explain("dev/tool", "prod/db", "5432");
    assert!(
        denied.starts_with(&format!("{} -> {}:5432 TCP: denied", p.tool.ip, p.db.ip))
            && denied.contains("prod/default-deny-ingress"),
        "{denied}"
    );
    let allowed = explain("prod/web", "prod/db", "TCP/5432");
    assert!(
        allowed.contains(": allowed") && allowed.contains("prod/web-to-db-pg"),
        "{allowed}"
    );

    eprintln!("j. a new pod is covered at its ADD, before the kubelet reports its address");
    let fresh = c.add_pod_unreported("prod", "fresh", 1, &[("app", "fresh")], &[]);
    // Without the CNI step the agent cannot know the address yet: nothing isolates it.
    let to_fresh = Flow::tcp(&p.tool, &fresh, 5432, false);
    assert!(
        c.answered_now(&to_fresh),
        "j. prod/fresh was isolated before its ADD told the agent its address"
    );
    let step = c.policy_step_add(1, &fresh);
    assert!(
        step.status.success(),
        "j. the ferrocni-policy step failed: {}{}",
        String::from_utf8_lossy(&step.stdout),
        String::from_utf8_lossy(&step.stderr)
    );
    let result: Value = serde_json::from_slice(&step.stdout).expect("the step's result");
    assert_eq!(
        result["ips"][0]["address"]
            .as_str()
            .map(|a| a.split('/').next()),
        Some(Some(fresh.ip.as_str())),
        "j. the step must pass prevResult on: {result}"
    );
    // The moment the step returns, the default-deny covers the pod: no waiting.
    assert!(
        !c.answered_now(&to_fresh),
        "j. prod/fresh was not isolated when its ADD returned"
    );
    assert!(
        !c.answered_now(&Flow::udp(&p.tool, &fresh, 5353, false)),
        "j. prod/fresh was not isolated (UDP) when its ADD returned"
    );
    // Egress is not restricted in prod.
    assert!(c.answered_now(&Flow::tcp(&fresh, &p.tool, 5432, true)));
    c.print_latencies();
    eprintln!(
        "steps a to i took {:?} after the cluster was up",
        started.elapsed()
    );
}

/// The same enforcement on another backend: the table matches the pods' own addresses on the
/// forward hook, whatever carries them between nodes (plain routes, a TUN and a userspace
/// relay, BIRD's routes, a WireGuard or IPIP tunnel). Three pods in `prod`, one per node: no
/// policy; then db takes web only, on TCP 5432 (and SCTP 5432 where the kernel has it), and
/// web may send to db only (egress, enforced on web's node); then no policy again.
fn policies_across_nodes_on(tag: &str, backend: &str) {
    let probe = std::path::Path::new(env!("CARGO_BIN_EXE_probe"));
    let Some(mut c) = PolicyCluster::start_on(tag, probe, backend) else {
        return;
    };
    if !c.enforcing {
        eprintln!("skipping: this ferrocni-agent has no --network-policy");
        return;
    }
    c.namespace("prod", &[("team", "a")]);
    let db = c.add_pod("prod", "db", 0, &[("app", "db")], &[]);
    let web = c.add_pod("prod", "web", 1, &[("app", "web")], &[]);
    let tool = c.add_pod("prod", "tool", 2, &[("app", "tool")], &[]);
    let sctp = |from: &Endpoint, to: &Endpoint, allowed: bool| {
        Flow::new(from, to, Proto::Sctp, 5432, allowed)
    };
    let mut open = Vec::new();
    for (a, b) in [(&db, &web), (&db, &tool), (&web, &tool)] {
        open.extend(both_ways(a, b, true, true));
    }
    open.push(sctp(&web, &db, true));
    c.check(&format!("{backend}: no policy"), &open);

    c.apply(&policy(
        "db-takes-web",
        json!({"podSelector": {"matchLabels": {"app": "db"}},
            "ingress": [{"from": [{"podSelector": {"matchLabels": {"app": "web"}}}],
                "ports": [{"protocol": "TCP", "port": 5432}, {"protocol": "SCTP", "port": 5432}]}]}),
    ));
    c.apply(&policy(
        "web-sends-to-db",
        json!({"podSelector": {"matchLabels": {"app": "web"}}, "policyTypes": ["Egress"],
            "egress": [{"to": [{"podSelector": {"matchLabels": {"app": "db"}}}]}]}),
    ));
    let flows = vec![
        Flow::tcp(&web, &db, 5432, true),
        Flow::udp(&web, &db, 5353, false),
        sctp(&web, &db, true),
        Flow::tcp(&tool, &db, 5432, false),
        Flow::udp(&tool, &db, 5353, false),
        sctp(&tool, &db, false),
        // db's replies pass; db itself is not limited on egress.
        Flow::tcp(&db, &tool, 5432, true),
        // web's egress: db only.
        Flow::tcp(&web, &tool, 5432, false),
        Flow::udp(&web, &tool, 5353, false),
        // tool is not selected by any policy, but web may not send to it.
        Flow::tcp(&tool, &web, 5432, true),
    ];
    c.check(&format!("{backend}: ingress and egress policies"), &flows);

    c.delete_all_policies();
    c.check(&format!("{backend}: every policy deleted"), &open);
    c.print_latencies();
}

#[test]
fn policies_on_host_gw() {
    require_root!();
    policies_across_nodes_on("kph", "host-gw");
}

#[test]
fn policies_on_udp() {
    require_root!();
    policies_across_nodes_on("kpu", "udp");
}

#[test]
fn policies_on_bgp() {
    require_root!();
    if !require_tools(&["bird"]) {
        return;
    }
    policies_across_nodes_on("kpb", "bgp");
}

/// In the VM on a stock kernel (the drivers, and SCTP), one after the other: two control
/// planes at once do not start in time there.
#[test]
fn policies_on_wireguard_then_ipip() {
    require_root!();
    require_driver!(kernel_has("wireguard"), "wireguard driver");
    require_driver!(kernel_has("ipip"), "ipip driver");
    policies_across_nodes_on("kpw", "wireguard");
    policies_across_nodes_on("kpi", "ipip");
}
