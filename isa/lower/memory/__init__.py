"""Where bytes live and how they get there: allocation of each memory's address space, routes
along the chip's DMA links, and staged copies between tensors."""
