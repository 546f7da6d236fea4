// Behavioural simulation model of the subset of the Xilinx UltraScale+ URAM288_BASE primitive that
// lbpipe.hdl.lib.uram instantiates. Written for lbpipe (simulation only: Vivado uses its own primitive).
//
// Sources of the behaviour (public AMD documentation):
//   UG974 (UltraScale Architecture Libraries Guide), "URAM288_BASE": port names and widths, attribute names.
//   UG573 (UltraScale Architecture Memory Resources):
//     "Address Bus - ADDR_A, ADDR_B": ADDR[11:0] selects one of 4,096 72-bit words; ADDR[22:12] cascade only.
//     "Dual Port SRAM Array Operations": one read or write per port per clock; port A's operation happens
//       before port B's, so A reading and B writing one address reads the old word, B reading after A writes
//       reads the new word, and B's write wins when both write.
//     "Data-Out Buses - DOUT_A, DOUT_B": DOUT holds its value through a write or no operation.
//     "Data-In Buses - DIN_A, DIN_B" / "Byte-Wide Write Enable": PARITY_INTERLEAVED: BWE[j] (j < 8) writes
//       DIN[8j+7:8j] and DIN[64+j]; PARITY_INDEPENDENT: BWE[j] writes DIN[8j+7:8j], BWE[8] writes DIN[71:64].
//     "UltraRAM Attributes", port table: OREG_A/B = "TRUE" adds the output register, loaded from the array's
//       read data when OREG_CE is high; RST resets the output register (RST_MODE "SYNC": at the clock edge) and
//       has priority over CE.
//   Contents start at zero.
//
// Subset: IREG_PRE_A/B, ECC (and OREG_ECC), auto sleep and the inversion attributes at their defaults
// ("FALSE"/0); RST_MODE "SYNC"; RST_A/B only with that port's OREG on (what RST does to the read data without the
// output register is not modelled); SLEEP and the error injection inputs held low. Anything else stops the
// simulation with an error message, so a design that relies on more than this model fails loudly instead of
// simulating wrongly.
`default_nettype none
module URAM288_BASE #(
    parameter integer AUTO_SLEEP_LATENCY = 8,
    parameter integer AVG_CONS_INACTIVE_CYCLES = 10,
    parameter BWE_MODE_A = "PARITY_INTERLEAVED",
    parameter BWE_MODE_B = "PARITY_INTERLEAVED",
    parameter EN_AUTO_SLEEP_MODE = "FALSE",
    parameter EN_ECC_RD_A = "FALSE",
    parameter EN_ECC_RD_B = "FALSE",
    parameter EN_ECC_WR_A = "FALSE",
    parameter EN_ECC_WR_B = "FALSE",
    parameter IREG_PRE_A = "FALSE",
    parameter IREG_PRE_B = "FALSE",
    parameter [0:0] IS_CLK_INVERTED = 1'b0,
    parameter [0:0] IS_EN_A_INVERTED = 1'b0,
    parameter [0:0] IS_EN_B_INVERTED = 1'b0,
    parameter [0:0] IS_RDB_WR_A_INVERTED = 1'b0,
    parameter [0:0] IS_RDB_WR_B_INVERTED = 1'b0,
    parameter [0:0] IS_RST_A_INVERTED = 1'b0,
    parameter [0:0] IS_RST_B_INVERTED = 1'b0,
    parameter OREG_A = "FALSE",
    parameter OREG_B = "FALSE",
    parameter OREG_ECC_A = "FALSE",
    parameter OREG_ECC_B = "FALSE",
    parameter RST_MODE_A = "SYNC",
    parameter RST_MODE_B = "SYNC",
    parameter USE_EXT_CE_A = "FALSE",
    parameter USE_EXT_CE_B = "FALSE"
) (
    output wire        DBITERR_A,
    output wire        DBITERR_B,
    output wire [71:0] DOUT_A,
    output wire [71:0] DOUT_B,
    output wire        SBITERR_A,
    output wire        SBITERR_B,
    input  wire [22:0] ADDR_A,
    input  wire [22:0] ADDR_B,
    input  wire [8:0]  BWE_A,
    input  wire [8:0]  BWE_B,
    input  wire        CLK,
    input  wire [71:0] DIN_A,
    input  wire [71:0] DIN_B,
    input  wire        EN_A,
    input  wire        EN_B,
    input  wire        INJECT_DBITERR_A,
    input  wire        INJECT_DBITERR_B,
    input  wire        INJECT_SBITERR_A,
    input  wire        INJECT_SBITERR_B,
    input  wire        OREG_CE_A,
    input  wire        OREG_CE_B,
    input  wire        OREG_ECC_CE_A,
    input  wire        OREG_ECC_CE_B,
    input  wire        RDB_WR_A,
    input  wire        RDB_WR_B,
    input  wire        RST_A,
    input  wire        RST_B,
    input  wire        SLEEP
);
    reg [71:0] mem [0:4095];
    reg [71:0] dout_a = 72'd0;
    reg [71:0] dout_b = 72'd0;
    reg [71:0] oreg_a = 72'd0;
    reg [71:0] oreg_b = 72'd0;
    integer w;

    assign DOUT_A = OREG_A == "TRUE" ? oreg_a : dout_a;
    assign DOUT_B = OREG_B == "TRUE" ? oreg_b : dout_b;
    assign SBITERR_A = 1'b0;
    assign DBITERR_A = 1'b0;
    assign SBITERR_B = 1'b0;
    assign DBITERR_B = 1'b0;

    initial begin
        for (w = 0; w < 4096; w = w + 1)
            mem[w] = 72'd0;
        if ((OREG_A != "FALSE" && OREG_A != "TRUE") || (OREG_B != "FALSE" && OREG_B != "TRUE")
                || RST_MODE_A != "SYNC" || RST_MODE_B != "SYNC" || OREG_ECC_A != "FALSE" || OREG_ECC_B != "FALSE"
                || IREG_PRE_A != "FALSE" || IREG_PRE_B != "FALSE" || EN_ECC_RD_A != "FALSE"
                || EN_ECC_RD_B != "FALSE" || EN_ECC_WR_A != "FALSE" || EN_ECC_WR_B != "FALSE"
                || EN_AUTO_SLEEP_MODE != "FALSE" || USE_EXT_CE_A != "FALSE" || USE_EXT_CE_B != "FALSE"
                || IS_CLK_INVERTED || IS_EN_A_INVERTED || IS_EN_B_INVERTED || IS_RDB_WR_A_INVERTED
                || IS_RDB_WR_B_INVERTED || IS_RST_A_INVERTED || IS_RST_B_INVERTED
                || (BWE_MODE_A != "PARITY_INTERLEAVED" && BWE_MODE_A != "PARITY_INDEPENDENT")
                || (BWE_MODE_B != "PARITY_INTERLEAVED" && BWE_MODE_B != "PARITY_INDEPENDENT")) begin
            $display("ERROR: %m: URAM288_BASE model: an attribute outside the modelled subset");
            $finish;
        end
    end

    // The bits of DIN a write with byte enables `bwe` stores, in BWE mode `interleaved` (1) or independent (0).
    function [71:0] write_mask(input [8:0] bwe, input interleaved);
        integer j;
        begin
            write_mask = 72'd0;
            for (j = 0; j < 8; j = j + 1) begin
                write_mask[8 * j +: 8] = {8{bwe[j]}};
                write_mask[64 + j] = interleaved ? bwe[j] : bwe[8];
            end
        end
    endfunction

    wire [71:0] mask_a = write_mask(BWE_A, BWE_MODE_A == "PARITY_INTERLEAVED");
    wire [71:0] mask_b = write_mask(BWE_B, BWE_MODE_B == "PARITY_INTERLEAVED");

    // Blocking writes to `mem` are the point: they order port A's operation before port B's within a clock.
    /* verilator lint_off BLKSEQ */
    always @(posedge CLK) begin
        if ((RST_A === 1'b1 && OREG_A != "TRUE") || (RST_B === 1'b1 && OREG_B != "TRUE") || SLEEP === 1'b1
                || INJECT_SBITERR_A === 1'b1
                || INJECT_DBITERR_A === 1'b1 || INJECT_SBITERR_B === 1'b1 || INJECT_DBITERR_B === 1'b1) begin
            $display("ERROR: %m: URAM288_BASE model: RST without OREG, SLEEP or error injection (outside the subset)");
            $finish;
        end
        // Output registers: the read data of the clock before (dout_* before this edge's reads update them).
        if (RST_A === 1'b1)
            oreg_a <= 72'd0;
        else if (OREG_CE_A)
            oreg_a <= dout_a;
        if (RST_B === 1'b1)
            oreg_b <= 72'd0;
        else if (OREG_CE_B)
            oreg_b <= dout_b;
        // Port A's operation, then port B's (blocking writes to `mem`: B sees what A wrote this clock).
        if (EN_A) begin
            if (RDB_WR_A)
                mem[ADDR_A[11:0]] = (mem[ADDR_A[11:0]] & ~mask_a) | (DIN_A & mask_a);
            else
                dout_a <= mem[ADDR_A[11:0]];
        end
        if (EN_B) begin
            if (RDB_WR_B)
                mem[ADDR_B[11:0]] = (mem[ADDR_B[11:0]] & ~mask_b) | (DIN_B & mask_b);
            else
                dout_b <= mem[ADDR_B[11:0]];
        end
    end
    /* verilator lint_on BLKSEQ */
endmodule
`default_nettype wire
