"""The lowering templates, one module per kind of op (convolution, matrix product, pooling,
reduction, resize, element-wise tail, data arrangement, indexed transfers, scalar kernels), and
the pieces they share: sliding windows, row slices of a layer group, vector steps, epilogues on
the way out of an accumulator, the bias table."""
