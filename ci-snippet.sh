# Real proxy daemons for tests/interop.rs (it fails under CI=true when one is missing).
export DEBIAN_FRONTEND=noninteractive
apt-get update
apt-get install -y --no-install-recommends tinyproxy microsocks dante-server
