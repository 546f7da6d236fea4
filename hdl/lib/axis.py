"""AXI4-Stream signature for packet streams (the OpenNIC user-box format: ``tdata`` 512, ``tkeep`` 64, ``tlast``,
``tuser``).

Byte order and framing, fixed here for every lbpipe block on packets:

* Byte ``i`` of a beat is ``tdata[8*i + 7 : 8*i]`` and is qualified by ``tkeep[i]``. The first byte of a frame on
  the wire (the first byte of the destination MAC address) is byte 0 of the frame's first beat: a frame's byte
  ``k`` is byte ``k mod (data_width/8)`` of beat ``k div (data_width/8)``. This is the little-endian lane order of
  the AXI4-Stream specification, of cocotbext-axi and of the Xilinx 100G MAC.
* A frame is the beats up to and including the one with ``tlast``. Every beat but the last is full (all of
  ``tkeep`` set); the last beat holds 1 to ``data_width/8`` bytes, contiguous from byte 0 (``tkeep`` is
  ``2**k - 1``). ``tdata`` bytes whose ``tkeep`` bit is clear are undefined: consumers ignore them and pass them
  on unchanged. Null bytes and position bytes of the full AXI4-Stream specification are not used.
* ``tuser`` is opaque side-band data carried with each beat (OpenNIC puts packet size and source/destination
  ports there); packet blocks pass it through beat for beat.
* A transfer happens on a clock edge where ``tvalid`` and ``tready`` are both high. ``tvalid`` never waits on
  ``tready``, and once high it stays high with the beat unchanged until the transfer (the
  ``amaranth.lib.stream`` rule, which AXI4-Stream also imposes).

The signature is seen from the source, like ``stream.Signature``: a block that receives packets declares
``In(AXI4StreamSignature())``, one that sends them ``Out(AXI4StreamSignature())``.
"""

from amaranth.lib import data, wiring
from amaranth.lib.wiring import In, Out

__all__ = ["AXI4StreamSignature", "AxisBeat"]


from lbpipe.hdl.lib.control import check_int as _check_int


class AXI4StreamSignature(wiring.Signature):
    """Signature of an AXI4-Stream link carrying packets, seen from the source.

    Parameters
    ----------
    data_width : int
        Width of ``tdata`` in bits: a positive multiple of 8 (512 for OpenNIC's 250 MHz user boxes).
    user_width : int
        Width of ``tuser`` in bits, at least 1.

    Members
    -------
    tdata : Out(data_width)
        Frame bytes, byte ``i`` in ``tdata[8*i+7 : 8*i]``.
    tkeep : Out(data_width // 8)
        Byte ``i`` of ``tdata`` is part of the frame; all ones except on a frame's last beat, where it is
        ``2**k - 1`` for the ``k`` bytes left.
    tvalid : Out(1)
    tready : In(1)
    tlast : Out(1)
        The beat is a frame's last.
    tuser : Out(user_width)
        Side-band data, passed through with its beat.

    Raises
    ------
    TypeError
        If a width is not an integer.
    ValueError
        If ``data_width`` is not a positive multiple of 8 or ``user_width`` is below 1.
    """

    def __init__(self, *, data_width=512, user_width=1):
        self.check_parameters(data_width=data_width, user_width=user_width)
        self._data_width = data_width
        self._user_width = user_width
        super().__init__({
            "tdata":  Out(data_width),
            "tkeep":  Out(data_width // 8),
            "tvalid": Out(1),
            "tready": In(1),
            "tlast":  Out(1),
            "tuser":  Out(user_width),
        })

    @classmethod
    def check_parameters(cls, *, data_width=512, user_width=1):
        """Validate parameters without building a signature.

        Raises
        ------
        TypeError
            If a parameter is not an integer.
        ValueError
            If a parameter is out of range.
        """
        _check_int("Data width", data_width)
        _check_int("User width", user_width)
        if data_width < 8 or data_width % 8:
            raise ValueError(f"Data width must be a positive multiple of 8, not {data_width}")
        if user_width < 1:
            raise ValueError(f"User width must be at least 1, not {user_width}")

    @property
    def data_width(self):
        return self._data_width

    @property
    def user_width(self):
        return self._user_width

    @property
    def bytes_per_beat(self):
        """``data_width // 8``: the width of ``tkeep``."""
        return self._data_width // 8

    def __eq__(self, other):
        return (type(other) is type(self) and
                self.data_width == other.data_width and
                self.user_width == other.user_width)

    def __hash__(self):
        return hash((type(self), self.data_width, self.user_width))

    def __repr__(self):
        return f"AXI4StreamSignature(data_width={self.data_width}, user_width={self.user_width})"


def AxisBeat(*, data_width=512, user_width=1):
    """One AXI4-Stream beat as a payload, for FIFOs and memories that hold beats (first field in the low bits):
    ``data`` (``tdata``), ``keep`` (``tkeep``), ``last`` (``tlast``), ``user`` (``tuser``)."""
    AXI4StreamSignature.check_parameters(data_width=data_width, user_width=user_width)
    return data.StructLayout({"data": data_width, "keep": data_width // 8, "last": 1, "user": user_width})
