"""The shared verification harness: the cocotb bench base and scoreboards (``harness``), the Icarus runner
(``runner``), scapy RoCEv2 and LAPS frame builders (``packets``), and the self-tests of the harness and of the
AXI4-Lite control bridge."""
