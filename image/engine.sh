# shellcheck shell=bash disable=SC2034  # sets variables for the scripts that source it
# Sourced by scripts/debian-base, scripts/build-image and the container test: picks the
# container engine and the options this machine needs, into
#   ENGINE        docker or podman
#   ENGINE_CMD    the engine's command with its global options (an array)
#   ENGINE_RUN    options every `run` and `build` needs here (an array)
# VMPLS_ENGINE=docker|podman forces one. Installs podman (Debian's) when neither answers,
# as root, unless VMPLS_NO_INSTALL=1.

engine_log() { echo "${ENGINE_LOG_NAME:-engine}: $*" >&2; }
engine_die() { echo "${ENGINE_LOG_NAME:-engine}: ERROR: $*" >&2; exit 1; }

# A docker client without a daemon (as on these machines) is no engine: ask the daemon.
engine_docker_answers() {
	command -v docker >/dev/null && timeout 10 docker version --format '{{.Server.Version}}' >/dev/null 2>&1
}

engine_install_podman() {
	[[ ${VMPLS_NO_INSTALL:-0} == 1 ]] && engine_die "no container engine: install podman or docker (VMPLS_NO_INSTALL=1)"
	[[ $(id -u) == 0 ]] || engine_die "no container engine: install podman (apt-get install podman runc) or docker"
	engine_log "installing podman, runc, mmdebstrap (Debian packages)"
	local pkgs=(podman runc uidmap mmdebstrap)
	if ! DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2; then
		apt-get update -q >&2
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >&2
	fi
}

engine_pick() {
	local want=${VMPLS_ENGINE:-}
	if [[ -z $want ]]; then
		if command -v podman >/dev/null; then
			want=podman
		elif engine_docker_answers; then
			want=docker
		else
			if command -v docker >/dev/null; then
				engine_log "a docker client is here but no docker daemon answers: using podman"
			fi
			engine_install_podman
			want=podman
		fi
	fi
	ENGINE=$want
	ENGINE_CMD=("$want")
	ENGINE_RUN=()
	case $want in
	docker)
		engine_docker_answers || engine_die "VMPLS_ENGINE=docker but no docker daemon answers ('docker version' fails)"
		;;
	podman)
		command -v podman >/dev/null || engine_install_podman
		# No systemd as PID 1 (containers, CI sandboxes): podman's default systemd cgroup
		# manager cannot work, cgroupfs does.
		if [[ ! -d /run/systemd/system ]]; then
			ENGINE_CMD+=(--cgroup-manager cgroupfs)
		fi
		# crun refuses hybrid cgroup hierarchies (v1 controllers with a v2 mount beside
		# them, as on these machines): runc runs there.
		if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
			command -v runc >/dev/null || engine_die "cgroups v1/hybrid here: podman needs runc (apt-get install runc)"
			ENGINE_CMD+=(--runtime runc)
		fi
		# Without explicit limits podman copies the host's hard limits, which runc may
		# be refused to set inside the sandbox; these are plenty for FRR and vmpls.
		ENGINE_RUN+=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
		;;
	*) engine_die "VMPLS_ENGINE=$want: docker or podman" ;;
	esac
}

# True when the engine holds the image NAME.
engine_has_image() {
	"${ENGINE_CMD[@]}" image inspect "$1" >/dev/null 2>&1
}
