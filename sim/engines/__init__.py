"""One module per engine kind: a pure `cycles(instr, ...)` cost from the chip's figures, and
`execute(instr, memories)` giving the instruction its meaning on bytes."""
