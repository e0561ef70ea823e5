# One region's gateway pair: renders each gateway's configuration from the
# typed variables and, when var.deploy is true, installs binary, unit,
# configuration and certificates on each edge host over SSH, one gateway
# after the other (the second waits until the first answers /readyz), so the
# pair keeps carrying traffic during a change.

locals {
  names = [for g in var.gateways : g.name]

  # Each gateway with its partner (the other gateway of the pair).
  pair = { for i, g in var.gateways : g.name => merge(g, {
    index   = i
    partner = var.gateways[1 - i]
  }) }

  # How other gateways reach each gateway of this pair.
  reach = { for g in var.gateways : g.name => {
    control = coalesce(g.control_advertise, g.control_listen)
    wan     = [for p in g.planes : coalesce(p.advertise, p.local)]
    gossip  = coalesce(g.gossip_advertise, g.gossip_bind)
  } }

  remote_gateway_names = flatten([for r in var.remote_regions : [for g in r.gateways : g.name]])
  remote_gossip        = compact(flatten([for r in var.remote_regions : [for g in r.gateways : g.gossip]]))

  unit_file   = coalesce(var.unit_file, "${path.module}/../../../systemd/mrgw.service")
  config_path = "${var.install.config_dir}/mrgw.yaml"

  configs = { for name, g in local.pair : name => templatefile("${path.module}/templates/mrgw.yaml.tftpl", {
    name           = name
    region         = var.region
    config_path    = local.config_path
    gw             = g
    lan            = var.lan
    wan            = var.wan
    gossip         = var.gossip
    limits         = var.limits
    scheduler      = var.scheduler
    log            = var.log
    install_user   = var.install.user
    remote_regions = var.remote_regions
    keyring        = var.gossip_keyring
    host_keys      = var.host_keys
    # The partner is accepted on the control channel too; it is not a
    # remote region (the two share node.region).
    peer_names = concat([g.partner.name], local.remote_gateway_names)
    seeds      = distinct(concat([local.reach[g.partner.name].gossip], local.remote_gossip, var.gossip.extra_seeds))
    tls = {
      ca_file   = "certs/ca.pem"
      cert_file = "certs/${name}.pem"
      key_file  = "certs/${name}-key.pem"
    }
  }) }

  wildcard = "^(0\\.0\\.0\\.0|\\[::\\]):"
}

# Rendering, and the checks that span several variables. Nothing here touches
# a host; the stored input is the configuration's digest, not its text (the
# text holds the gossip keys).
resource "terraform_data" "config" {
  for_each = local.pair

  input = {
    gateway = each.key
    region  = var.region
    # The digest reveals nothing of the keys; it triggers re-installation.
    sha256 = nonsensitive(sha256(local.configs[each.key]))
  }

  lifecycle {
    precondition {
      condition     = !contains([for r in var.remote_regions : r.name], var.region)
      error_message = "remote_regions lists this pair's own region ${var.region}; list only other regions."
    }
    precondition {
      condition     = length(setintersection(toset(local.names), toset(local.remote_gateway_names))) == 0 && length(distinct(local.remote_gateway_names)) == length(local.remote_gateway_names)
      error_message = "Gateway names must be unique across all regions: they are gossip member names and certificate names."
    }
    precondition {
      condition = (!can(regex(local.wildcard, each.value.control_listen)) || each.value.control_advertise != null) && (
        !can(regex(local.wildcard, each.value.gossip_bind)) || each.value.gossip_advertise != "") && alltrue([
      for p in each.value.planes : !can(regex(local.wildcard, p.local)) || p.advertise != null])
      error_message = "Gateway ${each.key} listens on a wildcard address; give control_advertise, gossip_advertise or planes[].advertise so other gateways know where to reach it."
    }
    precondition {
      condition     = !var.deploy || (var.binary_file != null && var.certs_dir != null)
      error_message = "deploy = true needs binary_file and certs_dir."
    }
  }
}

# Installation, first gateway then second.
module "first" {
  source = "../gateway-host"

  enabled     = var.deploy
  name        = var.gateways[0].name
  ssh_host    = var.gateways[0].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.configs[var.gateways[0].name]
  config_hash = terraform_data.config[var.gateways[0].name].output.sha256
  admin       = var.gateways[0].admin_listen
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}

module "second" {
  source     = "../gateway-host"
  depends_on = [module.first]

  enabled     = var.deploy
  name        = var.gateways[1].name
  ssh_host    = var.gateways[1].ssh_host
  ssh         = var.ssh
  install     = var.install
  config      = local.configs[var.gateways[1].name]
  config_hash = terraform_data.config[var.gateways[1].name].output.sha256
  admin       = var.gateways[1].admin_listen
  binary_file = var.binary_file
  unit_file   = local.unit_file
  certs_dir   = var.certs_dir
}
