# Inputs of one region's gateways (1 to 16). Every address and name is
# checked here with the rules `mrgw config check` applies, so that a typo
# fails at plan time, before anything is copied to a host. See
# docs/CONFIG.md for the keys these become.

variable "region" {
  description = "Name of the region these gateways serve (node.region of each)."
  type        = string
  validation {
    condition     = can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", var.region))
    error_message = "The region must be a name of letters, digits, '.', '_' and '-', at most 63 characters, starting and ending with a letter or digit."
  }
}

variable "gateways" {
  description = <<-EOT
    The region's gateways, 1 to 16, each on its own edge host; they are
    installed in this order, one at a time. Listen addresses (lan_listen,
    control_listen, gossip_bind, admin_listen, planes[].local) are ip:port
    with an IP literal; a wildcard (0.0.0.0 or [::]) needs the matching
    *_advertise address that other gateways use to reach it.
    control_advertise, planes[].advertise and gossip_advertise are announced
    in gossip (control.advertise, wan.planes[].advertise, gossip.advertise:
    IP literals, since gossip carries addresses); `mrgw config check`
    refuses a wildcard listener without its advertise address, and so does
    the plan. capacity is node.capacity:
    the gateway's share of the region's flows relative to the others
    (null: the default, 100). ssh_host is where Terraform connects to
    install the gateway.
  EOT
  type = list(object({
    name              = string
    ssh_host          = string
    lan_listen        = string
    control_listen    = string
    control_advertise = optional(string)
    gossip_bind       = string
    gossip_advertise  = optional(string, "")
    admin_listen      = optional(string, "127.0.0.1:9464")
    capacity          = optional(number)
    planes = list(object({
      name      = string
      local     = string
      advertise = optional(string)
    }))
  }))

  validation {
    condition     = length(var.gateways) >= 1 && length(var.gateways) <= 16
    error_message = "A region has 1 to 16 gateways."
  }
  validation {
    condition = alltrue([for g in var.gateways :
      can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", g.name))
    ]) && length(distinct([for g in var.gateways : g.name])) == length(var.gateways)
    error_message = "Gateway names must be distinct names of letters, digits, '.', '_' and '-', at most 63 characters, starting and ending with a letter or digit."
  }
  validation {
    condition = alltrue([for g in var.gateways :
      g.capacity == null ? true : (floor(g.capacity) == g.capacity && g.capacity >= 1 && g.capacity <= 65535)
    ])
    error_message = "A gateway's capacity (node.capacity) must be an integer 1..65535, or null for the default (100)."
  }
  validation {
    condition = alltrue([for g in var.gateways :
      length(g.planes) >= 1 && length(g.planes) <= 64 &&
      length(distinct([for p in g.planes : p.name])) == length(g.planes) &&
      length(distinct([for p in g.planes : p.local])) == length(g.planes) &&
      alltrue([for p in g.planes : can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", p.name))])
    ])
    error_message = "Each gateway needs 1 to 64 planes with distinct valid names and distinct local addresses."
  }
  validation {
    condition     = length(distinct([for g in var.gateways : sort([for p in g.planes : p.name])])) == 1
    error_message = "The gateways of a region must all have the same plane names (a plane is a network every edge host of the region is attached to)."
  }
  validation {
    # ip:port, IPv4 a.b.c.d or IPv6 in brackets, port 1..65535.
    condition = alltrue([for a in flatten([for g in var.gateways : concat(
      [g.lan_listen, g.control_listen, g.gossip_bind],
      g.control_advertise == null ? [] : [g.control_advertise],
      [for p in g.planes : p.local],
      compact([for p in g.planes : p.advertise]),
      g.admin_listen == "" ? [] : [g.admin_listen],
      g.gossip_advertise == "" ? [] : [g.gossip_advertise]
      )]) : try(
      can(cidrhost(format("%s/%d", coalesce(regex("^(?:\\[([0-9A-Fa-f:.]+)\\]|([0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+)):([0-9]{1,5})$", a)...), strcontains(a, "[") ? 128 : 32), 0)) &&
      tonumber(regex(":([0-9]{1,5})$", a)[0]) >= 1 && tonumber(regex(":([0-9]{1,5})$", a)[0]) <= 65535,
    false)])
    error_message = "lan_listen, control_listen, control_advertise, gossip_bind, gossip_advertise, admin_listen, planes[].local and planes[].advertise must be ip:port with an IP literal (a.b.c.d:port or [v6]:port) and a port 1..65535; a gateway binds or announces them, so DNS names are not allowed."
  }
  validation {
    condition     = alltrue([for g in var.gateways : length(trimspace(g.ssh_host)) > 0])
    error_message = "Every gateway needs an ssh_host."
  }
}

variable "remote_regions" {
  description = <<-EOT
    The other regions, each with its gateways: name (their node.name and
    certificate name), gossip (host:port to join them at) and, only for a
    gateway that announces a control address that cannot be dialled from
    here (one managed elsewhere; a gateway of this module announces its
    control_advertise), control: host:port to dial instead, an IP or a DNS
    name. rtt_hint (a
    duration such as "80ms") seeds the controllers before the first RTT
    sample. Gossip finds every region and gateway by itself: this list
    chooses the seeds (see remote_seeds), checks that gateway names are
    unique, and renders a regions: entry only for a hint or an override.
    Another instance's as_remote_region output is one entry.
  EOT
  type = list(object({
    name     = string
    rtt_hint = optional(string)
    gateways = list(object({
      name    = string
      gossip  = string
      control = optional(string)
    }))
  }))
  default = []

  validation {
    condition = alltrue([for r in var.remote_regions :
      can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", r.name)) &&
      (r.rtt_hint == null ? true : can(regex("^[0-9]+(\\.[0-9]+)?(ns|us|µs|ms|s|m|h)$", r.rtt_hint))) &&
      length(r.gateways) >= 1 && length(r.gateways) <= 16 &&
      alltrue([for g in r.gateways : can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", g.name))])
    ]) && length(distinct([for r in var.remote_regions : r.name])) == length(var.remote_regions)
    error_message = "Remote regions need distinct valid names, an rtt_hint with a unit (\"80ms\", \"0s\") or none, and 1 to 16 gateways each, every gateway with a valid name."
  }
  validation {
    condition = alltrue([for a in compact(flatten([for r in var.remote_regions : [for g in r.gateways : [g.control, g.gossip]]])) : try(
      (can(cidrhost(format("%s/%d", coalesce(regex("^(?:\\[([0-9A-Fa-f:.]+)\\]|([0-9]+\\.[0-9]+\\.[0-9]+\\.[0-9]+)):([0-9]{1,5})$", a)...), strcontains(a, "[") ? 128 : 32), 0)) ||
        (can(regex("^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*:[0-9]{1,5}$", a)) &&
      !can(regex("(^|\\.)[0-9]+:[0-9]+$", a)))) &&
      tonumber(regex(":([0-9]{1,5})$", a)[0]) >= 1 && tonumber(regex(":([0-9]{1,5})$", a)[0]) <= 65535,
    false)])
    error_message = "Remote gateway addresses (gossip, control) must be host:port, the host an IP literal or a DNS name, the port 1..65535."
  }
}

variable "remote_seeds" {
  description = <<-EOT
    How many gateways of other regions each gateway lists in gossip.seeds,
    besides its own region's other gateways: one per region, in as many
    regions as that allows, then a second per region, and so on. They are
    chosen by rendezvous hashing of the gateway's name with theirs, so the
    gateways of a region seed from different ones and adding a region
    rarely changes an existing gateway's seeds. Any one live seed is enough
    to join.
  EOT
  type        = number
  default     = 3
  validation {
    condition     = floor(var.remote_seeds) == var.remote_seeds && var.remote_seeds >= 0 && var.remote_seeds <= 16
    error_message = "remote_seeds must be an integer 0..16."
  }
}

variable "control_deny" {
  description = "control.deny of every gateway: peer gateways refused whatever their certificate, each NAME, REGION/NAME, REGION/* or serial:HEX (the certificate's serial). The gateway reloads it live; Terraform re-installs (restarts) one gateway at a time like any change."
  type        = list(string)
  default     = []
  validation {
    condition = alltrue([for d in var.control_deny :
      can(regex("^serial:[0-9A-Fa-f:]*[0-9A-Fa-f][0-9A-Fa-f:]*$", d)) && length(replace(d, ":", "")) <= 70 ||
      can(regex("^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?/)?[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$", d)) ||
      can(regex("^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?/\\*$", d))
    ])
    error_message = "control_deny entries are NAME, REGION/NAME, REGION/* or serial:HEX (1 to 64 hexadecimal digits, colons allowed)."
  }
}

variable "gossip_keyring" {
  description = "Gossip encryption keys, base64 of 16, 24 or 32 bytes (`head -c 32 /dev/urandom | base64`). The first encrypts; all decrypt. Written into the configuration file (mode 0640, group mrgw)."
  type        = list(string)
  sensitive   = true
  validation {
    condition = length(var.gossip_keyring) >= 1 && alltrue([for k in var.gossip_keyring :
    can(regex("^([A-Za-z0-9+/]{22}==|[A-Za-z0-9+/]{32}|[A-Za-z0-9+/]{43}=)$", k))])
    error_message = "The gossip keyring needs at least one key, each the base64 encoding of 16, 24 or 32 bytes."
  }
}

variable "host_keys" {
  description = "Host credentials, each ID:BASE64 of a 16..64-byte secret (`echo trainers:$(head -c 32 /dev/urandom | base64)`): a host registers with one of them (mrgw host --key-file). Written into the configuration file (mode 0640, group mrgw); live-reloadable."
  type        = list(string)
  sensitive   = true
  validation {
    condition     = length(var.host_keys) >= 1 && alltrue([for k in var.host_keys : can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,62}:[A-Za-z0-9+/]{22,}={0,2}$", k))])
    error_message = "host_keys needs at least one credential, each ID:BASE64 (a name, a colon, the base64 of a 16..64-byte secret): gateways refuse to run with unauthenticated hosts."
  }
}

variable "gossip" {
  description = "Gossip settings: profile (wan or lan) and extra seeds (host:port) beyond the region's other gateways and the remote_seeds gateways of other regions."
  type = object({
    profile     = optional(string, "wan")
    extra_seeds = optional(list(string), [])
  })
  default = {}
  validation {
    condition     = contains(["wan", "lan"], var.gossip.profile)
    error_message = "The gossip profile must be wan or lan (custom timings are for loopback tests, not edge hosts)."
  }
}

variable "lan" {
  description = "Host-facing side: the data-center congestion controller and an optional pacing ceiling per host connection in bit/s."
  type = object({
    congestion_control = optional(string, "dc-aimd")
    max_rate_bps       = optional(number, 0)
  })
  default = {}
  validation {
    condition     = contains(["dc-aimd", "fixed"], var.lan.congestion_control) && var.lan.max_rate_bps >= 0 && (var.lan.congestion_control != "fixed" || var.lan.max_rate_bps > 0)
    error_message = "lan.congestion_control must be dc-aimd or fixed; max_rate_bps is >= 0 and required (> 0) with fixed."
  }
}

variable "wan" {
  description = "Inter-region side: paths per peer, datagram payload size (1024 works on any WAN; at most 1368 on a 1500-byte IPv4 WAN MTU, 1416 when every peer speaks wire version 2), controller, the WAN rate (max_rate_bps per gateway, region_rate_bps shared by the region's gateways), cipher and key rotation interval."
  type = object({
    paths_per_peer     = optional(number, 16)
    mtu                = optional(number, 1024)
    congestion_control = optional(string, "longrtt-htcp")
    max_rate_bps       = optional(number, 0)
    region_rate_bps    = optional(number, 0)
    ecn                = optional(bool, true)
    gso                = optional(bool, true)
    gro                = optional(bool, true)
    cipher             = optional(string, "aes-128-gcm")
    key_rotation       = optional(string, "1h")
  })
  default = {}
  validation {
    condition     = floor(var.wan.paths_per_peer) == var.wan.paths_per_peer && var.wan.paths_per_peer >= 1 && var.wan.paths_per_peer <= 1024
    error_message = "wan.paths_per_peer must be an integer 1..1024."
  }
  validation {
    condition     = floor(var.wan.mtu) == var.wan.mtu && var.wan.mtu >= 512 && var.wan.mtu <= 65000
    error_message = "wan.mtu must be an integer 512..65000 (1024, the default, works on any WAN; at most 1368 on a 1500-byte IPv4 WAN MTU, 1416 when every peer speaks wire version 2)."
  }
  validation {
    condition     = contains(["longrtt-htcp", "longrtt-scalable", "fixed"], var.wan.congestion_control) && var.wan.max_rate_bps >= 0 && var.wan.region_rate_bps >= 0 && floor(var.wan.region_rate_bps) == var.wan.region_rate_bps && (var.wan.congestion_control != "fixed" || var.wan.max_rate_bps > 0 || var.wan.region_rate_bps > 0)
    error_message = "wan.congestion_control must be longrtt-htcp, longrtt-scalable or fixed; max_rate_bps and region_rate_bps are integers >= 0, and fixed needs one of them > 0."
  }
  validation {
    condition     = contains(["aes-128-gcm", "aes-256-gcm", "chacha20-poly1305"], var.wan.cipher)
    error_message = "wan.cipher must be aes-128-gcm, aes-256-gcm or chacha20-poly1305."
  }
  validation {
    condition     = can(regex("^[0-9]+(\\.[0-9]+)?(s|m|h)$", var.wan.key_rotation))
    error_message = "wan.key_rotation must be a duration in s, m or h (\"10m\", \"1h\"), 1s..24h."
  }
}

variable "limits" {
  description = "Bounds on what each gateway holds: buffered bytes, concurrent host flows, credit per flow."
  type = object({
    memory_bytes      = optional(number, 1073741824)
    max_flows         = optional(number, 256)
    flow_credit_bytes = optional(number, 4194304)
  })
  default = {}
  validation {
    condition = (var.limits.memory_bytes >= 1048576 && var.limits.max_flows >= 1 && var.limits.max_flows <= 1000000 &&
    var.limits.flow_credit_bytes <= var.limits.memory_bytes)
    error_message = "limits: memory_bytes at least 1 MiB, max_flows 1..1000000, flow_credit_bytes at most memory_bytes."
  }
}

variable "scheduler" {
  description = "Traffic classes with their weights, and the class of flows that name none."
  type = object({
    default_class = optional(string, "default")
    classes = optional(list(object({
      name   = string
      weight = number
    })), [{ name = "default", weight = 1 }])
  })
  default = {}
  validation {
    condition = (length(var.scheduler.classes) >= 1 &&
      contains([for c in var.scheduler.classes : c.name], var.scheduler.default_class) &&
      length(distinct([for c in var.scheduler.classes : c.name])) == length(var.scheduler.classes) &&
    alltrue([for c in var.scheduler.classes : c.weight >= 1 && c.weight <= 1000000 && floor(c.weight) == c.weight]))
    error_message = "scheduler: at least one class, distinct names, integer weights 1..1000000, and default_class one of the classes."
  }
}

variable "log" {
  description = "Log level (debug, info, warn, error) and format (text, json)."
  type = object({
    level  = optional(string, "info")
    format = optional(string, "json")
  })
  default = {}
  validation {
    condition     = contains(["debug", "info", "warn", "error"], var.log.level) && contains(["text", "json"], var.log.format)
    error_message = "log.level must be debug, info, warn or error; log.format text or json."
  }
}

# --- Installation ------------------------------------------------------------

variable "deploy" {
  description = "Install onto the hosts over SSH. false renders the configurations only (plan and apply then touch no host): that is what CI and the tests do."
  type        = bool
  default     = false
}

variable "binary_file" {
  description = "Local path of the mrgw binary (linux/amd64 or the hosts' architecture) to install. Required when deploy is true."
  type        = string
  default     = null
}

variable "certs_dir" {
  description = "Local directory with ca.pem and, for each gateway NAME, NAME.pem and NAME-key.pem (see docs/OPERATIONS.md, certificates). Required when deploy is true."
  type        = string
  default     = null
}

variable "unit_file" {
  description = "Local path of the systemd unit to install; null means deploy/systemd/mrgw.service of this repository."
  type        = string
  default     = null
}

variable "ssh" {
  description = "How Terraform reaches the hosts: user (root or one with password-less sudo), port, private key file (null: use the SSH agent), optional bastion host and the hosts' expected host key."
  type = object({
    user             = optional(string, "root")
    port             = optional(number, 22)
    private_key_file = optional(string)
    bastion_host     = optional(string)
    bastion_user     = optional(string)
    host_key         = optional(string)
    timeout          = optional(string, "2m")
  })
  default = {}
  validation {
    condition     = var.ssh.port >= 1 && var.ssh.port <= 65535 && length(var.ssh.user) > 0
    error_message = "ssh.user must be set and ssh.port be 1..65535."
  }
}

variable "install" {
  description = "Where things go on the hosts: configuration directory, binary path, service account, and how long to wait for /readyz after a restart."
  type = object({
    config_dir    = optional(string, "/etc/mrgw")
    binary        = optional(string, "/usr/local/bin/mrgw")
    user          = optional(string, "mrgw")
    ready_timeout = optional(number, 120)
  })
  default = {}
  validation {
    condition     = startswith(var.install.config_dir, "/") && startswith(var.install.binary, "/") && can(regex("^[a-z_][a-z0-9_-]{0,31}$", var.install.user))
    error_message = "install.config_dir and install.binary must be absolute paths and install.user a valid user name."
  }
}
