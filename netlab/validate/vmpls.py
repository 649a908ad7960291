# netlab validation plugin of the vmpls device: FRR's (BGP, OSPF, IS-IS, routes, and the
# Linux ping checks), since the device is FRR. netlab looks plugins up by the device's
# own name only, not its parent's. Installed into ~/.netlab/validate by netlab/install.
#
# FRR 8.4 (the vmpls-frr image built with --suite bookworm) does not answer every
# command these ask: the OSPF checks need FRR 10's `show ip ospf vrf default neighbor ... json`.
from netsim.validate.frr import *  # noqa: F401,F403
