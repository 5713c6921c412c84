//! What a reload cannot apply: the keys whose new value takes effect only when `serve`
//! starts again (docs/reference.md, "Reload"), so that SIGHUP names each one instead of
//! looking applied.

use super::Config;

/// The keys that differ between `old` and `new` and apply only at the next start.
pub fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    let mut changed = |key: &str, differs: bool| {
        if differs {
            keys.push(key.to_string());
        }
    };
    changed("store.path", old.store_path != new.store_path);
    changed("store.url", old.store_url != new.store_url);
    changed("store.claim_hold", old.claim_hold != new.claim_hold);
    changed("store.synchronous", old.durability != new.durability);
    changed(
        "store.events_retention",
        old.events_retention != new.events_retention,
    );
    changed("server.socket", old.socket != new.socket);
    changed("server.http", old.http != new.http);
    changed(
        "server.max_connections",
        old.max_connections != new.max_connections,
    );
    changed(
        "server.max_tcp_connections",
        old.max_tcp_connections != new.max_tcp_connections,
    );
    let (a, b) = (&old.token_files, &new.token_files);
    changed("server.token_file", a.admin != b.admin);
    changed("server.lease_token_file", a.lease != b.lease);
    changed("server.http_token_file", a.http != b.http);
    let (a, b) = (&old.tls, &new.tls);
    changed("tls.ca_cert", a.ca_cert != b.ca_cert);
    changed("tls.ca_key", a.ca_key != b.ca_key);
    changed("tls.extra_roots", a.extra_roots != b.extra_roots);
    // The gateways take the rules when they start.
    changed("ban", old.bans != new.bans);
    for i in 0..old.gateways.len().max(new.gateways.len()) {
        match (old.gateways.get(i), new.gateways.get(i)) {
            (Some(a), Some(b)) if a != b => keys.push(format!("gateway[{i}]")),
            (None, Some(_)) => keys.push(format!("gateway[{i}] (added)")),
            (Some(_), None) => keys.push(format!("gateway[{i}] (removed)")),
            _ => {}
        }
    }
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Config {
        Config::parse(text, "t.toml", None).unwrap()
    }

    #[test]
    fn restart_keys_are_named() {
        let base = "[store]\npath = \"/a.db\"\n[server]\nhttp = \"127.0.0.1:9464\"\n\
                    [[gateway]]\nlisten = \"127.0.0.1:8899\"\n";
        let cases: &[(&str, &[&str])] = &[
            (base, &[]),
            // Pool changes apply: nothing to warn about.
            (&format!("{base}[[pool]]\nname = \"eu\"\n"), &[]),
            (
                "[store]\npath = \"/b.db\"\n[server]\nhttp = \"127.0.0.1:9465\"\n\
                 [[gateway]]\nlisten = \"127.0.0.1:8899\"\n",
                &["store.path", "server.http"],
            ),
            (
                "[store]\npath = \"/a.db\"\nsynchronous = \"full\"\nevents_retention = \"1d\"\n\
                 [server]\nhttp = \"127.0.0.1:9464\"\nmax_connections = 9\ntoken_file = \"/t\"\n\
                 [[gateway]]\nlisten = \"127.0.0.1:8899\"\nretries = 5\n\
                 [[gateway]]\nlisten = \"127.0.0.1:8900\"\n",
                &[
                    "store.synchronous",
                    "store.events_retention",
                    "server.max_connections",
                    "server.token_file",
                    "gateway[0]",
                    "gateway[1] (added)",
                ],
            ),
            (
                "[store]\npath = \"/a.db\"\n[server]\nhttp = \"127.0.0.1:9464\"\n",
                &["gateway[0] (removed)"],
            ),
            (
                &format!("{base}[tls]\nca_cert = \"/c.pem\"\nextra_roots = \"/r.pem\"\n"),
                &["tls.ca_cert", "tls.extra_roots"],
            ),
        ];
        for (text, want) in cases {
            assert_eq!(
                restart_only_changes(&parse(base), &parse(text)),
                want.iter().map(|s| s.to_string()).collect::<Vec<_>>(),
                "{text}"
            );
        }
    }
}
