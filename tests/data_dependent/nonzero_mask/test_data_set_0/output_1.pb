B
sum_squareJ„A