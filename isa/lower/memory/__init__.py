"""Where bytes live and how they get there: allocation of each memory's address space and
routes along the chip's DMA links."""
