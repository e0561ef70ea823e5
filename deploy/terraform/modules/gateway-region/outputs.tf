output "region" {
  description = "The region these gateways serve."
  value       = var.region
}

output "gateways" {
  description = "Each gateway's endpoints: where it listens (lan, control, gossip, admin, planes), how other gateways reach it, its metrics URL and the host it is installed on."
  value = { for g in var.gateways : g.name => {
    region     = var.region
    index      = local.gw[g.name].index
    capacity   = g.capacity
    ssh_host   = g.ssh_host
    lan        = g.lan_listen
    control    = g.control_listen
    gossip     = g.gossip_bind
    admin      = g.admin_listen
    planes     = { for p in g.planes : p.name => p.local }
    reach      = local.reach[g.name]
    metrics    = g.admin_listen == "" ? null : "http://${g.admin_listen}/metrics"
    readyz     = g.admin_listen == "" ? null : "http://${g.admin_listen}/readyz"
    seeds      = local.seeds[g.name]
    config     = local.config_path
    config_sha = terraform_data.config[g.name].output.sha256
  } }
}

output "as_remote_region" {
  description = "This region as another instance's remote_regions entry sees it: each gateway's gossip address (its control address is announced in gossip: control_advertise, else control_listen). Add rtt_hint."
  value = {
    name = var.region
    gateways = [for g in var.gateways : {
      name   = g.name
      gossip = local.reach[g.name].gossip
    }]
  }
}

output "configs" {
  description = "The rendered configuration of each gateway, by name (sensitive: it holds the gossip keys)."
  value       = local.configs
  sensitive   = true
}

output "installed" {
  description = "Whether each gateway was installed in this run (false when deploy is false)."
  # install_N has one instance for gateways[N] and none past the last.
  value = zipmap(local.names, concat(
    module.install_0[*].installed,
    module.install_1[*].installed,
    module.install_2[*].installed,
    module.install_3[*].installed,
    module.install_4[*].installed,
    module.install_5[*].installed,
    module.install_6[*].installed,
    module.install_7[*].installed,
    module.install_8[*].installed,
    module.install_9[*].installed,
    module.install_10[*].installed,
    module.install_11[*].installed,
    module.install_12[*].installed,
    module.install_13[*].installed,
    module.install_14[*].installed,
    module.install_15[*].installed,
  ))
}
