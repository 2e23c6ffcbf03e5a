// examples/two_pass_forward.mlir inside a named module, `module @bn_twopass { ... }`: the
// same function, character for character, indented. IREE names its VM module after the MLIR
// module's symbol (here "bn_twopass"; "module" when unnamed), so the adapter must look the
// function up in that module; adapters/stablehlo/test_named_module.py checks that this file and
// the unnamed one get the same verdicts on XLA and on IREE (docs/ADAPTERS.md, "StableHLO").
module @bn_twopass {
  func.func @forward(%x: tensor<${X_SHAPE}x${T}>, %gamma: tensor<${C}x${T}>, %beta: tensor<${C}x${T}>)
      -> (tensor<${X_SHAPE}x${T}>, tensor<${C}x${T}>, tensor<${C}x${T}>) {
    %zero = stablehlo.constant dense<0.0> : tensor<${T}>
    %m = stablehlo.constant dense<${M}.0> : tensor<${C}x${T}>
    %eps = stablehlo.constant dense<${EPS}> : tensor<${C}x${T}>
    %sum = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [${REDUCE_DIMS}]
        : (tensor<${X_SHAPE}x${T}>, tensor<${T}>) -> tensor<${C}x${T}>
    %mean = stablehlo.divide %sum, %m : tensor<${C}x${T}>
    %mean_b = stablehlo.broadcast_in_dim %mean, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
    %d = stablehlo.subtract %x, %mean_b : tensor<${X_SHAPE}x${T}>
    %d2 = stablehlo.multiply %d, %d : tensor<${X_SHAPE}x${T}>
    %ss = stablehlo.reduce(%d2 init: %zero) applies stablehlo.add across dimensions = [${REDUCE_DIMS}]
        : (tensor<${X_SHAPE}x${T}>, tensor<${T}>) -> tensor<${C}x${T}>
    %var = stablehlo.divide %ss, %m : tensor<${C}x${T}>
    %ve = stablehlo.add %var, %eps : tensor<${C}x${T}>
    %r = stablehlo.rsqrt %ve : tensor<${C}x${T}>
    %scale = stablehlo.multiply %gamma, %r : tensor<${C}x${T}>
    %scale_b = stablehlo.broadcast_in_dim %scale, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
    %beta_b = stablehlo.broadcast_in_dim %beta, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
    %t = stablehlo.multiply %d, %scale_b : tensor<${X_SHAPE}x${T}>
    %y = stablehlo.add %t, %beta_b : tensor<${X_SHAPE}x${T}>
    return %y, %mean, %var : tensor<${X_SHAPE}x${T}>, tensor<${C}x${T}>, tensor<${C}x${T}>
  }
}
