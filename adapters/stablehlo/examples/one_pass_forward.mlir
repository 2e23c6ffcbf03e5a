// One-pass BatchNorm forward in plain StableHLO ops (the textbook E[x^2] - E[x]^2), a
// template for `shlo_bn.py --module` that bnconf rejects: it is, op for op, what XLA's
// BatchNormExpander and IREE's StableHLOToStableHLOPreprocessing turn
// `stablehlo.batch_norm_training` into (docs/ADAPTERS.md, "StableHLO").
//   mean = sum(x) / M,  var = sum(x*x) / M - mean*mean   (no clamp at 0)
//   y    = (x - mean) / sqrt(var + eps) * gamma + beta
func.func @forward(%x: tensor<${X_SHAPE}x${T}>, %gamma: tensor<${C}x${T}>, %beta: tensor<${C}x${T}>)
    -> (tensor<${X_SHAPE}x${T}>, tensor<${C}x${T}>, tensor<${C}x${T}>) {
  %zero = stablehlo.constant dense<0.0> : tensor<${T}>
  %m = stablehlo.constant dense<${M}.0> : tensor<${C}x${T}>
  %eps = stablehlo.constant dense<${EPS}> : tensor<${C}x${T}>
  %sum = stablehlo.reduce(%x init: %zero) applies stablehlo.add across dimensions = [${REDUCE_DIMS}]
      : (tensor<${X_SHAPE}x${T}>, tensor<${T}>) -> tensor<${C}x${T}>
  %x2 = stablehlo.multiply %x, %x : tensor<${X_SHAPE}x${T}>
  %sum2 = stablehlo.reduce(%x2 init: %zero) applies stablehlo.add across dimensions = [${REDUCE_DIMS}]
      : (tensor<${X_SHAPE}x${T}>, tensor<${T}>) -> tensor<${C}x${T}>
  %mean = stablehlo.divide %sum, %m : tensor<${C}x${T}>
  %ex2 = stablehlo.divide %sum2, %m : tensor<${C}x${T}>
  %mean2 = stablehlo.multiply %mean, %mean : tensor<${C}x${T}>
  %var = stablehlo.subtract %ex2, %mean2 : tensor<${C}x${T}>
  %ve = stablehlo.add %var, %eps : tensor<${C}x${T}>
  %sd = stablehlo.sqrt %ve : tensor<${C}x${T}>
  %mean_b = stablehlo.broadcast_in_dim %mean, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
  %sd_b = stablehlo.broadcast_in_dim %sd, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
  %gamma_b = stablehlo.broadcast_in_dim %gamma, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
  %beta_b = stablehlo.broadcast_in_dim %beta, dims = [${FEATURE_INDEX}] : (tensor<${C}x${T}>) -> tensor<${X_SHAPE}x${T}>
  %d = stablehlo.subtract %x, %mean_b : tensor<${X_SHAPE}x${T}>
  %xhat = stablehlo.divide %d, %sd_b : tensor<${X_SHAPE}x${T}>
  %t = stablehlo.multiply %xhat, %gamma_b : tensor<${X_SHAPE}x${T}>
  %y = stablehlo.add %t, %beta_b : tensor<${X_SHAPE}x${T}>
  return %y, %mean, %var : tensor<${X_SHAPE}x${T}>, tensor<${C}x${T}>, tensor<${C}x${T}>
}
