# One region's gateways (1 to 16): renders each gateway's configuration from
# the typed variables and, when var.deploy is true, installs binary, unit,
# configuration and certificates on each edge host over SSH, one gateway
# after the other (install.tf: each waits until the one before answers
# /readyz), so the region keeps carrying traffic during a change.
#
# The configurations are seed-only: gossip finds every region and gateway
# (docs/CONFIG.md, regions), so a gateway lists no peers, only gossip seeds:
# its own region's other gateways and a few gateways of other regions
# (remote_seeds). Each gateway announces its own addresses in gossip (the
# *_advertise ones where given); a regions: entry is rendered only for an
# rtt_hint or a remote_regions control override.

locals {
  names = [for g in var.gateways : g.name]

  # Each gateway with its position (the install order).
  gw = { for i, g in var.gateways : g.name => merge(g, { index = i }) }

  # How other gateways reach each gateway of this region.
  reach = { for g in var.gateways : g.name => {
    control = coalesce(g.control_advertise, g.control_listen)
    wan     = [for p in g.planes : coalesce(p.advertise, p.local)]
    gossip  = coalesce(g.gossip_advertise, g.gossip_bind)
  } }

  remote_gateway_names = flatten([for r in var.remote_regions : [for g in r.gateways : g.name]])

  # Seeds from other regions, per gateway: rendezvous hashing ranks each
  # region's gateways and the regions themselves by sha256 of this gateway's
  # name with theirs; the candidates are sorted by (rank within the region,
  # rank of the region), so the first remote_seeds are one gateway in each
  # of as many regions as possible, then a second, and so on. A region
  # added later enters a gateway's seeds only where it ranks high enough.
  remote_candidates = { for g in var.gateways : g.name => sort(flatten([for r in var.remote_regions : [
    for i, k in sort([for rg in r.gateways : "${sha256("${g.name}|${rg.name}")} ${rg.gossip}"]) :
    format("%02d %s %s", i, sha256("${g.name}|${r.name}"), split(" ", k)[1])
  ]])) }
  remote_seeds = { for name, c in local.remote_candidates : name => [
    for k in slice(c, 0, min(length(c), var.remote_seeds)) : split(" ", k)[2]
  ] }

  seeds = { for g in var.gateways : g.name => distinct(concat(
    [for o in var.gateways : local.reach[o.name].gossip if o.name != g.name],
    local.remote_seeds[g.name],
    var.gossip.extra_seeds,
  )) }

  # regions: only what gossip cannot tell: RTT hints, and the control
  # address of a remote gateway that announces one not reachable from here
  # (remote_regions[].gateways[].control).
  region_overrides = [for r in var.remote_regions : {
    name     = r.name
    rtt_hint = r.rtt_hint
    gateways = [for g in r.gateways : { name = g.name, control = g.control } if g.control != null]
  } if r.rtt_hint != null || length([for g in r.gateways : g if g.control != null]) > 0]

  unit_file   = coalesce(var.unit_file, "${path.module}/../../../systemd/mrgw.service")
  config_path = "${var.install.config_dir}/mrgw.yaml"

  configs = { for name, g in local.gw : name => templatefile("${path.module}/templates/mrgw.yaml.tftpl", {
    name         = name
    region       = var.region
    config_path  = local.config_path
    gw           = g
    lan          = var.lan
    wan          = var.wan
    gossip       = var.gossip
    limits       = var.limits
    scheduler    = var.scheduler
    log          = var.log
    install_user = var.install.user
    regions      = local.region_overrides
    keyring      = var.gossip_keyring
    host_keys    = var.host_keys
    deny         = var.control_deny
    seeds        = local.seeds[name]
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
  for_each = local.gw

  input = {
    gateway = each.key
    region  = var.region
    # The digest reveals nothing of the keys; it triggers re-installation.
    sha256 = nonsensitive(sha256(local.configs[each.key]))
  }

  lifecycle {
    precondition {
      condition     = !contains([for r in var.remote_regions : r.name], var.region)
      error_message = "remote_regions lists this region, ${var.region}; list only other regions."
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
      condition     = !contains(local.seeds[each.key], local.reach[each.key].gossip)
      error_message = "Gateway ${each.key} would seed gossip with its own address ${local.reach[each.key].gossip}: gossip.extra_seeds or a remote region lists it."
    }
    precondition {
      condition     = !var.deploy || (var.binary_file != null && var.certs_dir != null)
      error_message = "deploy = true needs binary_file and certs_dir."
    }
  }
}

# The module was gateway-pair, with one module call per gateway.
moved {
  from = module.first
  to   = module.install_0[0]
}

moved {
  from = module.second
  to   = module.install_1[0]
}
